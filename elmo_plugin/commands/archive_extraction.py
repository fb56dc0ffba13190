"""Python's process-wide tarfile extraction filter set to `data` (Python 3.14's default) when
elmo_plugin is imported. So allennlp's own `load_archive` (`allennlp predict`, `evaluate`,
`train -r`, `Predictor.from_path`), which calls `extractall` without a filter, refuses an absolute
or `..` member, a link pointing outside its temporary folder, and device files instead of writing
them outside it. Listed in docs/security.md. Python 3.11.0-3.11.3 have no filters."""

import tarfile

if hasattr(tarfile, "data_filter"):
    tarfile.TarFile.extraction_filter = staticmethod(tarfile.data_filter)
