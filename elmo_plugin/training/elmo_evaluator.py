"""Evaluator `elmo_evaluator`: allennlp's `simple` evaluator that applies `ProcessSettings` once,
when `allennlp evaluate` builds it (after loading the archive, before the first batch). It logs the
metrics of each evaluation file (allennlp's shows them only in its progress bar) and writes
`--output-file` and `--predictions-output-file` whole (`OutputFile`; `allennlp evaluate` checks
them first: commands/evaluate_output.py); and the total of labels unseen in training."""

import contextlib
import json
import logging
from typing import Any, Optional, Union

import torch
from allennlp.common.util import dump_metrics
from allennlp.data import DataLoader
from allennlp.evaluation.evaluator import Evaluator, SimpleEvaluator
from allennlp.evaluation.serializers.serializers import Serializer
from allennlp.models import Model

from elmo_plugin.data.output_file import OutputFile, opened
from elmo_plugin.data.unseen_labels_vocabulary import UnseenLabelsAsErrors
from elmo_plugin.training.process_settings import ProcessSettings

logger = logging.getLogger(__name__)


@Evaluator.register("elmo_evaluator")
class ElmoEvaluator(SimpleEvaluator):
    """
    `allennlp evaluate` builds its evaluator from the config's top-level `evaluation` key
    (`allennlp train` ignores that key), so a config or archive with
    `evaluation: {type: "elmo_evaluator"}` sets the process settings for evaluate; an archive
    without it gets them with `-o '{"evaluation": {"type": "elmo_evaluator"}}'`. With the
    `unseen_labels_as_errors` vocabulary, each evaluation file ends with one warning giving the
    total of its gold labels unseen in training. The metrics of each file are logged
    (`Metrics: {...}`); `--output-file` and `--predictions-output-file` are written whole.

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

    def __call__(self, model: Model, data_loader: DataLoader, *args, **kwargs) -> dict[str, Any]:
        output = kwargs.pop("metrics_output_file", None)
        predictions = kwargs.pop("predictions_output_file", None)
        with contextlib.ExitStack() as written:
            if predictions is not None:  # allennlp writes it: into our file, by descriptor
                whole = written.enter_context(OutputFile(str(predictions)))
                kwargs["predictions_output_file"] = opened(whole.file.fileno())
            metrics = super().__call__(model, data_loader, *args, **kwargs)
        if output is not None:
            with OutputFile(str(output)) as out:
                out.file.write(json.dumps(metrics, indent=2))
        dump_metrics(None, metrics, log=True)
        if isinstance(model.vocab, UnseenLabelsAsErrors):
            summary = model.vocab.take_unseen_labels_summary()
            if summary:
                logger.warning("elmo_evaluator: %s", summary)
        return metrics
