"""Both reading directions of a padded batch at once: the backward direction reads each sentence
reversed within its length, so padding stays at the end for both and one causal computation
serves both (shared by the LSTM and transformer contextualizers)."""

import torch


def reverse_within_length(lengths: torch.Tensor, timesteps: int) -> torch.Tensor:
    """(batch,) lengths -> (batch, timesteps) index that reverses each sequence's real tokens
    and leaves padding in place. Applying it twice is the identity."""
    positions = torch.arange(timesteps, device=lengths.device)
    reversed_positions = lengths.unsqueeze(1) - 1 - positions
    return torch.where(reversed_positions >= 0, reversed_positions, positions)


def gather_timesteps(inputs: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """inputs (batch, timesteps, dim), index (batch, timesteps) -> reordered inputs."""
    return inputs.gather(1, index.unsqueeze(-1).expand_as(inputs))


def both_directions(inputs: torch.Tensor, reverse_index: torch.Tensor) -> torch.Tensor:
    """(batch, timesteps, dim) -> (2, batch, timesteps, dim): as read forward, and as read
    backward (reversed within length by `reverse_index`)."""
    return torch.stack([inputs, gather_timesteps(inputs, reverse_index)])


def join_directions(
    states: torch.Tensor, reverse_index: torch.Tensor, keep: torch.Tensor
) -> torch.Tensor:
    """(2, batch, timesteps, dim) states of `both_directions` inputs -> (batch, timesteps,
    2 * dim) [forward; backward] in the original order, times `keep` (batch, timesteps, 1): zero
    at padding."""
    return torch.cat([states[0], gather_timesteps(states[1], reverse_index)], dim=-1) * keep
