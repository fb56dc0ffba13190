"""allennlp's `SampledSoftmaxLoss` whose full-softmax evaluation runs over row chunks."""

from typing import Optional, cast

import torch
from allennlp.modules.sampled_softmax_loss import SampledSoftmaxLoss

# Logits held at once during evaluation: 2^24 float32 = 64 MiB (the unchunked loss holds
# targets x rows: 2560 x 793,471 = 8 GB per direction for a batch of 128 x 20 tokens).
MAX_EVAL_LOGITS = 2**24


class ChunkedSampledSoftmaxLoss(SampledSoftmaxLoss):
    """
    Training is allennlp's sampled softmax (but no targets give a zero with a graph). Evaluation
    is the same full softmax (summed negative log likelihood of the targets), computed over
    chunks of softmax rows: the log-sum-exp is accumulated chunk by chunk and the target logits
    are gathered, so memory is bounded by `max_eval_logits` instead of targets x rows.
    Differentiable.
    """

    max_eval_logits: int = MAX_EVAL_LOGITS

    @classmethod
    def with_parameters(
        cls,
        parameters: dict[str, torch.Tensor],
        num_words: int,
        embedding_dim: int,
        num_samples: int,
        sparse: bool = False,
    ) -> "ChunkedSampledSoftmaxLoss":
        """allennlp's constructor with these arguments, holding the given parameters (the state
        dict of a `SampledSoftmaxLoss` made with them, `keep_vars=True`: the same tensors, not
        copies). Built on the meta device, so no second softmax of num_words x embedding_dim is
        drawn or allocated, and the random number generators are left as they were."""
        with torch.device("meta"):
            loss = cls(num_words, embedding_dim, num_samples, sparse=sparse)
        loss.load_state_dict(parameters, assign=True)
        return loss

    def forward(
        self,
        embeddings: torch.Tensor,
        targets: torch.Tensor,
        target_token_embedding: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """embeddings (n, P), targets (n,) -> summed NLL, a scalar: allennlp's, except that no
        targets (n = 0) give a zero still connected to the softmax's parameters (allennlp's is
        a constant), so that a process with no targets computes the same gradients, zero, as
        its peers, for DDP's all-reduce and the sparse gradients' gathering alike."""
        if not self.training:
            return self._forward_eval(embeddings, targets)
        return self._forward_train(embeddings, targets, cast(torch.Tensor, target_token_embedding))

    def _forward_eval(self, embeddings: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """embeddings (n, P), targets (n,) softmax rows -> summed NLL, a scalar."""
        if self.sparse:
            weight, bias = self.softmax_w.weight, self.softmax_b.weight.squeeze(1)
        else:  # Parameters here (allennlp's attributes are typed as its sparse Embeddings)
            weight, bias = cast(torch.Tensor, self.softmax_w), cast(torch.Tensor, self.softmax_b)
        embeddings = embeddings.float()
        rows_per_chunk = max(1, self.max_eval_logits // max(1, embeddings.size(0)))
        log_normalizer = embeddings.new_full((embeddings.size(0),), float("-inf"))
        for start in range(0, weight.size(0), rows_per_chunk):
            chunk_logits = embeddings @ weight[start : start + rows_per_chunk].float().t()
            chunk_logits = chunk_logits + bias[start : start + rows_per_chunk].float()
            log_normalizer = torch.logaddexp(log_normalizer, chunk_logits.logsumexp(dim=1))
        targets = targets.long()
        target_logits = (embeddings * weight[targets].float()).sum(dim=1) + bias[targets].float()
        return (log_normalizer - target_logits).sum()
