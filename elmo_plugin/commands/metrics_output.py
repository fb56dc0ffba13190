"""allennlp's own metrics files are written whole once elmo_plugin is imported:
`allennlp.common.util.dump_metrics` is replaced by `dump_metrics_whole`. That is what `allennlp
train` writes `metrics_epoch_N.json` and `metrics.json` with. The JSON goes through `OutputFile`:
no file cut short under its name, and a full disk is one DiskFull naming the file. Listed in
docs/security.md."""

import json
from typing import Any, Optional

from allennlp.common import util as common_util

from elmo_plugin.data.output_file import OutputFile


def dump_metrics_whole(
    file_path: Optional[str], metrics: dict[str, Any], log: bool = False
) -> None:
    """allennlp's `dump_metrics` (the same JSON and log line), the file written by `OutputFile`."""
    metrics_json = json.dumps(metrics, indent=2)
    if file_path:
        with OutputFile(file_path) as output:
            output.file.write(metrics_json)
    if log:
        common_util.logger.info("Metrics: %s", metrics_json)


common_util.dump_metrics = dump_metrics_whole
