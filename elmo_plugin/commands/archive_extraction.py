"""allennlp's own archive loading extracts through `safe_archive` once elmo_plugin is imported:
`allennlp.models.archival.extracted_archive` is replaced by `extracted_model_archive`. That is
what `load_archive` (`allennlp predict`, `evaluate`, `Model.from_archive`, `Predictor.from_path`)
and `PretrainedModelInitializer` extract with. Every member is checked before anything is
extracted: an absolute, `..`, link or device member is refused, naming the archive and the
member. The temporary folder is removed when extraction fails (allennlp's own leaves it behind).
Listed in docs/security.md."""

from allennlp.models import archival

from elmo_plugin.archives.safe_archive import extracted_model_archive

# allennlp passes the archive positionally: its parameter's other name does not matter
archival.extracted_archive = extracted_model_archive  # type: ignore[assignment]
