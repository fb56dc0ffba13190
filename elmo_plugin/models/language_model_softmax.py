"""The softmax of any allennlp-models `LanguageModel` (ours or theirs) as plain matrices."""

import torch
from allennlp.modules.softmax_loss import SoftmaxLoss
from allennlp_models.lm.models.language_model import LanguageModel


def softmax_matrices(model: LanguageModel) -> tuple[torch.Tensor, torch.Tensor]:
    """(weight (rows, P), bias (rows,)) views of the softmax, whichever allennlp loss holds it:
    `SoftmaxLoss` (softmax_w (P, rows)) or `SampledSoftmaxLoss` (softmax_w (rows, P), or sparse
    embeddings). Row r scores vocabulary index r + 1 (index 0 is padding); allennlp-models
    allocates one row more than there are tokens, which scores no token."""
    loss = model._softmax_loss
    weight, bias = loss.softmax_w, loss.softmax_b
    if isinstance(weight, torch.nn.Embedding):
        return weight.weight, bias.weight[:, 0]
    if isinstance(loss, SoftmaxLoss):
        return weight.t(), bias
    return weight, bias
