"""Evaluator `elmo_evaluator`: allennlp's `simple` evaluator that applies `ProcessSettings` once,
when `allennlp evaluate` builds it (after loading the archive, before the first batch)."""

from typing import Optional, Union

import torch
from allennlp.evaluation.evaluator import Evaluator, SimpleEvaluator
from allennlp.evaluation.serializers.serializers import Serializer

from elmo_plugin.training.process_settings import ProcessSettings


@Evaluator.register("elmo_evaluator")
class ElmoEvaluator(SimpleEvaluator):
    """
    `allennlp evaluate` builds its evaluator from the config's top-level `evaluation` key
    (`allennlp train` ignores that key), so a config or archive with
    `evaluation: {type: "elmo_evaluator"}` sets the process settings for evaluate; an archive
    without it gets them with `-o '{"evaluation": {"type": "elmo_evaluator"}}'`.

    # Parameters

    keep_freed_heap : `bool`, optional (default = `True`)
        Keep freed CPU memory in the process (glibc's heap thresholds): see `ProcessSettings`.
    tf32 : `bool`, optional (default = `None`)
        Let (or stop) float32 matmuls and convolutions use TF32; unset: torch's defaults.
    batch_serializer, cuda_device, postprocessor_fn_name
        As allennlp's `simple` evaluator (`cuda_device` comes from evaluate's `--cuda-device`).
    """

    def __init__(
        self,
        keep_freed_heap: bool = True,
        tf32: Optional[bool] = None,
        batch_serializer: Optional[Serializer] = None,
        cuda_device: Union[int, torch.device] = -1,
        postprocessor_fn_name: str = "make_output_human_readable",
    ) -> None:
        super().__init__(batch_serializer, cuda_device, postprocessor_fn_name)
        self.settings = ProcessSettings(keep_freed_heap=keep_freed_heap, tf32=tf32)
        self.settings.apply()
