"""Inference-speed evaluation of a `BiLmEncoder`: same numbers as `encoder(char_ids)`, less work.

Character CNN: each distinct token of the batch is encoded once, and each convolution only runs
over the positions that can matter. A token of L characters (beginning/end-of-word included) is
followed by padding characters; every window that starts at or after L sees only padding and so
has one and the same value per filter, computed once. The max over positions is therefore the
max over the first L windows (computed on a prefix of L + width - 1 characters) and, when the
token leaves room for one, that all-padding window: exact, not an approximation. Tokens are
grouped by length so each group convolves a short prefix.

LSTM (`ElmoLstm`): without clipping, torch's fused LSTM (what `ElmoLstm` itself runs). With
clipping (no fused kernel exists), one loop over time for both directions at once (batched
matmuls on stacked weights), the input projections of all time steps in one matmul, and sentences
sorted by length so finished ones drop out of the loop.

Nothing is kept between calls.
"""
from typing import List, Tuple

import torch
from allennlp.data.token_indexers.elmo_indexer import ELMoCharacterMapper

from elmo_plugin.modules.bilm_encoder import BiLmEncoder
from elmo_plugin.modules.elmo_char_cnn import ACTIVATIONS, ElmoCharCnn
from elmo_plugin.modules.elmo_lstm import ElmoLstm, gather_timesteps, reverse_within_length

PADDING_CHAR_ID = ELMoCharacterMapper.padding_character + 1
# Upper bounds of token lengths (in characters, incl. begin/end of word) grouped together.
LENGTH_GROUPS = (5, 7, 9, 12, 16, 24, 50)


def _pooled_convolutions(cnn: ElmoCharCnn, char_ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """(n, 50) ids of real tokens, (n,) their lengths -> (n, total filters) after max + activation."""
    width_max = max(width for width, _ in cnn.filters)
    num_chars = char_ids.size(1)
    longest = int(lengths.max())
    prefix = min(num_chars, longest + width_max - 1)
    embedded = cnn.char_embedding(char_ids[:, :prefix]).transpose(1, 2)  # (n, E, prefix)
    padding = cnn.char_embedding.weight[PADDING_CHAR_ID].view(1, -1, 1)
    activation = ACTIVATIONS[cnn.activation]
    pooled = []
    for (width, _), conv in zip(cnn.filters, cnn.convolutions):
        best = conv(embedded).max(dim=-1)[0]
        if longest <= num_chars - width:  # some tokens have an all-padding window
            padded_window = conv(padding.expand(1, -1, width))[0, :, 0]
            has_padded_window = (lengths <= num_chars - width).unsqueeze(1)
            best = torch.where(has_padded_window, torch.maximum(best, padded_window), best)
        pooled.append(activation(best))
    return torch.cat(pooled, dim=-1)


def char_cnn_vectors(cnn: ElmoCharCnn, char_ids: torch.Tensor) -> torch.Tensor:
    """char ids (..., 50) -> (..., projection_dim), as `cnn(char_ids)`: padding tokens are 0."""
    flat = char_ids.reshape(-1, char_ids.size(-1))
    distinct, inverse = torch.unique(flat, dim=0, return_inverse=True)
    is_token = (distinct > 0).any(dim=-1)
    lengths = ((distinct > 0) & (distinct != PADDING_CHAR_ID)).sum(dim=-1)
    pooled = distinct.new_zeros(len(distinct), sum(count for _, count in cnn.filters), dtype=cnn.projection.weight.dtype)
    lower = 0
    for upper in LENGTH_GROUPS:
        group = (is_token & (lengths > lower) & (lengths <= upper)).nonzero().squeeze(1)
        lower = upper
        if len(group):
            pooled = pooled.index_copy(0, group, _pooled_convolutions(cnn, distinct[group], lengths[group]))
    vectors = cnn.projection(cnn.highways(pooled)) * is_token.unsqueeze(1).to(pooled.dtype)
    return vectors[inverse].view(*char_ids.shape[:-1], -1)


def _stacked(lstms: List[torch.nn.LSTM], name: str) -> torch.Tensor:
    """The named parameter of the forward and backward LSTM, transposed for x @ W: (2, in, out)."""
    return torch.stack([getattr(lstm, name) for lstm in lstms]).transpose(1, 2)


def _clipped_layer(
    lstms: List[torch.nn.LSTM], inputs: torch.Tensor, active: List[int], cell_clip, proj_clip
) -> torch.Tensor:
    """Both directions of one layer: inputs (2, batch, T, P), batch sorted by decreasing length,
    active[t] = number of sequences longer than t -> (2, batch, T, P), zero past each length."""
    directions, batch, timesteps, dim = inputs.shape
    cells = lstms[0].hidden_size
    bias = torch.stack([lstm.bias_ih_l0 + lstm.bias_hh_l0 for lstm in lstms]).unsqueeze(1)
    input_gates = torch.baddbmm(bias, inputs.reshape(directions, -1, dim), _stacked(lstms, "weight_ih_l0"))
    input_gates = input_gates.view(directions, batch, timesteps, 4 * cells)
    recurrent, projection = _stacked(lstms, "weight_hh_l0"), _stacked(lstms, "weight_hr_l0")
    state = inputs.new_zeros(directions, batch, dim)
    memory = inputs.new_zeros(directions, batch, cells)
    outputs = []
    for step in range(timesteps):
        size = active[step]
        if size == 0:
            break
        state, memory = state[:, :size], memory[:, :size]
        gates = torch.baddbmm(input_gates[:, :size, step], state, recurrent)
        input_gate, forget_gate, candidate, output_gate = gates.chunk(4, dim=-1)
        memory = torch.addcmul(
            torch.sigmoid(forget_gate) * memory, torch.sigmoid(input_gate), torch.tanh(candidate)
        )
        if cell_clip is not None:
            memory = memory.clamp(-cell_clip, cell_clip)
        state = torch.bmm(torch.sigmoid(output_gate) * torch.tanh(memory), projection)
        if proj_clip is not None:
            state = state.clamp(-proj_clip, proj_clip)
        outputs.append(torch.nn.functional.pad(state, (0, 0, 0, batch - size)))
    outputs += [inputs.new_zeros(directions, batch, dim)] * (timesteps - len(outputs))
    return torch.stack(outputs, dim=2)


def lstm_layers(lstm: ElmoLstm, inputs: torch.Tensor, mask: torch.BoolTensor) -> List[torch.Tensor]:
    """As `lstm.all_layers(inputs, mask)` in eval mode (no dropout)."""
    if lstm.cell_clip is None and lstm.proj_clip is None:
        return lstm.all_layers(inputs, mask)
    lengths = mask.sum(dim=1)
    order = torch.argsort(lengths, descending=True, stable=True)
    restore = torch.argsort(order)
    lengths = lengths[order]
    timesteps = inputs.size(1)
    counts = torch.bincount(lengths, minlength=timesteps + 1).tolist()
    active, remaining = [], len(lengths)
    for step in range(timesteps):
        remaining -= counts[step]  # sequences of length == step are done
        active.append(remaining)
    reverse_index = reverse_within_length(lengths, timesteps)
    sorted_inputs = inputs[order]
    layer_input = torch.stack([sorted_inputs, gather_timesteps(sorted_inputs, reverse_index)])
    keep = mask[order].unsqueeze(-1).to(inputs.dtype)
    layers = []
    for index, pair in enumerate(zip(lstm.forward_layers, lstm.backward_layers)):
        output = _clipped_layer(list(pair), layer_input, active, lstm.cell_clip, lstm.proj_clip)
        if index > 0:
            output = output + layer_input
        layer = torch.cat([output[0], gather_timesteps(output[1], reverse_index)], dim=-1) * keep
        layers.append(layer[restore])
        layer_input = output
    return layers


def encoder_layers(encoder: BiLmEncoder, char_ids: torch.Tensor) -> Tuple[List[torch.Tensor], torch.BoolTensor]:
    """As `encoder(char_ids)` in eval mode: (every layer, mask)."""
    mask = (char_ids > 0).any(dim=-1)
    tokens = char_cnn_vectors(encoder.char_cnn, char_ids)
    contextualizer = encoder.contextualizer
    if isinstance(contextualizer, ElmoLstm) and not (contextualizer.training and contextualizer._dropout.p > 0):
        layers = lstm_layers(contextualizer, tokens, mask)
    else:
        layers = contextualizer.all_layers(tokens, mask)
    return [torch.cat([tokens, tokens], dim=-1), *layers], mask
