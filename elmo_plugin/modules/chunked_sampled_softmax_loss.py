"""allennlp's `SampledSoftmaxLoss` at fixed shapes, its negatives drawn on the device, its
full-softmax evaluation over row chunks."""

from typing import Optional, cast

import torch
from allennlp.modules.sampled_softmax_loss import SampledSoftmaxLoss
from allennlp.nn.util import tiny_value_of_dtype

from elmo_plugin.modules.log_uniform_sampler import LogUniformSampler
from elmo_plugin.modules.touched_rows import TouchedRows
from elmo_plugin.modules.weighted_softmax_loss import per_group, rebuilt

# Logits held at once during evaluation: 2^24 float32 = 64 MiB (the unchunked loss holds
# targets x rows: 2560 x 793,471 = 8 GB per direction for a batch of 128 x 20 tokens).
MAX_EVAL_LOGITS = 2**24


class ChunkedSampledSoftmaxLoss(SampledSoftmaxLoss):
    """
    embeddings (groups..., n, P), targets (groups..., n) softmax rows, weights (groups..., n)
    -> (groups...) the weighted sums of the targets' negative log likelihoods (nats). Weights
    0/1 mark the real targets of a batch's positions, so every shape is the batch's and none
    depends on its content. Each group (e.g. a direction of the biLM) has its own negatives.

    Training is allennlp's sampled softmax (its parameters, its logits and accidental-hit
    masking), with the negatives drawn on the embeddings' device by `LogUniformSampler`
    (allennlp draws them with numpy on the host), all groups' rows read at once. With
    `row_gradients` (sparse softmax only) those rows are `TouchedRows`: their gradient is a
    dense parameter of fixed shape, no sparse tensors. Evaluation is the full softmax over
    chunks of rows for the positions of nonzero weight: the log-sum-exp is accumulated chunk by
    chunk, so memory is bounded by `max_eval_logits`, not targets x rows.
    """

    max_eval_logits: int = MAX_EVAL_LOGITS
    touched: Optional[TouchedRows]

    def __init__(
        self, num_words: int, embedding_dim: int, num_samples: int, sparse: bool = False
    ) -> None:
        super().__init__(num_words, embedding_dim, num_samples, sparse=sparse)
        self.sampler = LogUniformSampler(num_words, num_samples)
        self.register_module("touched", None)

    @classmethod
    def with_parameters(
        cls,
        parameters: dict[str, torch.Tensor],
        num_words: int,
        embedding_dim: int,
        num_samples: int,
        sparse: bool = False,
        row_gradients: bool = False,
    ) -> "ChunkedSampledSoftmaxLoss":
        """A loss holding the given parameters (the state dict of a `SampledSoftmaxLoss` made
        with these arguments, `keep_vars=True`: the same tensors, not copies), made without a
        second softmax (`rebuilt`); `row_gradients` (with `sparse`) reads rows through
        `TouchedRows`."""
        loss = rebuilt(cls, parameters, num_words, embedding_dim, num_samples, sparse=sparse)
        if row_gradients:
            loss.touched = TouchedRows([loss.softmax_w.weight, loss.softmax_b.weight])
        return loss

    def forward(  # type: ignore[override]  # weights, not the unimplemented tied embeddings
        self,
        embeddings: torch.Tensor,
        targets: torch.Tensor,
        weights: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        loss = self._forward_train if self.training else self._forward_eval
        return per_group(loss, embeddings, targets, weights)

    def rows(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """ids (m,) -> the softmax's weight rows (m, P) and biases (m,), differentiable."""
        if self.touched is not None:
            weight, bias = self.touched(ids)
            return weight, bias.squeeze(1)
        if self.sparse:
            return self.softmax_w(ids), self.softmax_b(ids).squeeze(1)
        weight, bias = cast(torch.Tensor, self.softmax_w), cast(torch.Tensor, self.softmax_b)
        return weight.index_select(0, ids), bias.index_select(0, ids)

    def _forward_train(  # type: ignore[override]
        self, embeddings: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor
    ) -> torch.Tensor:
        """embeddings (G, n, P), targets, weights (G, n) -> (G,): every target of a group
        against the same `num_samples` negatives."""
        groups, n = targets.shape
        sampled = self.sampler.sample(embeddings.device, groups)  # (G, S)
        ids = torch.cat([targets.flatten(), sampled.flatten()])
        weight, bias = self.rows(ids)
        count = self.sampler.expected_count(ids)
        # each logit: row . embedding + bias - log(expected count)
        offset = bias - torch.log(count + tiny_value_of_dtype(count.dtype))
        true, true_offset = weight[: groups * n].view_as(embeddings), offset[: groups * n]
        sampled_weight = weight[groups * n :].view(groups, -1, weight.size(-1))
        true_logits = (true * embeddings).sum(-1) + true_offset.view(groups, n)
        sampled_logits = torch.bmm(embeddings, sampled_weight.transpose(1, 2))
        sampled_logits = sampled_logits + offset[groups * n :].view(groups, 1, -1)
        # a negative that is the target itself does not count against it
        hits = sampled.unsqueeze(1) == targets.unsqueeze(2)  # (G, n, S)
        sampled_logits = sampled_logits.masked_fill(hits, -10000.0)
        logits = torch.cat([true_logits.unsqueeze(2), sampled_logits], dim=2)
        negative_log_likelihood = -torch.nn.functional.log_softmax(logits, dim=2)[..., 0]
        return (negative_log_likelihood * weights).sum(dim=1)

    def _forward_eval(  # type: ignore[override]
        self, embeddings: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor
    ) -> torch.Tensor:
        """embeddings (G, n, P), targets, weights (G, n) -> (G,): the full softmax over chunks
        of `max_eval_logits` logits, for the positions of nonzero weight only (padding costs no
        logits; selecting them reads their count on the host, once a batch)."""
        if self.sparse:
            weight, bias = self.softmax_w.weight, self.softmax_b.weight.squeeze(1)
        else:  # Parameters here (allennlp's attributes are typed as its sparse Embeddings)
            weight, bias = cast(torch.Tensor, self.softmax_w), cast(torch.Tensor, self.softmax_b)
        real = weights.flatten().nonzero().squeeze(1)
        rows = embeddings.flatten(0, 1)[real].float()
        rows_per_chunk = max(1, self.max_eval_logits // max(1, rows.size(0)))
        log_normalizer = rows.new_full((rows.size(0),), float("-inf"))
        for start in range(0, weight.size(0), rows_per_chunk):
            chunk_logits = rows @ weight[start : start + rows_per_chunk].float().t()
            chunk_logits = chunk_logits + bias[start : start + rows_per_chunk].float()
            log_normalizer = torch.logaddexp(log_normalizer, chunk_logits.logsumexp(dim=1))
        targets = targets.flatten()[real]
        target_logits = (rows * weight[targets].float()).sum(dim=1) + bias[targets].float()
        weighted = (log_normalizer - target_logits) * weights.flatten()[real]
        return weighted.new_zeros(weights.size(0)).index_add(0, real // weights.size(1), weighted)
