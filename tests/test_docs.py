"""The README and docs/ against the code: registered names, configs, files, links, overrides."""

import json
import re
from pathlib import Path

import pytest
from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.common.registrable import Registrable
from allennlp.data import Vocabulary
from allennlp.models import Model

import elmo_plugin  # noqa: F401  (registers every component)
from tests.helpers import CONFIG_DIR, REPO_ROOT

README = REPO_ROOT / "README.md"
DOCS = sorted((REPO_ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS, REPO_ROOT / "CHANGELOG.md"]


def page_id(page: Path) -> str:
    return str(page.relative_to(REPO_ROOT))


def registered_names() -> dict[str, set[str]]:
    """{base class name: names registered by elmo_plugin's classes}."""
    names: dict[str, set[str]] = {}
    for base, registry in Registrable._registry.items():
        for name, (cls, _) in registry.items():
            if cls.__module__.startswith("elmo_plugin"):
                names.setdefault(base.__name__, set()).add(name)
    return names


def readme_registered_names() -> dict[str, set[str]]:
    """The README's "Registered names" table: {kind: names}."""
    section = README.read_text(encoding="utf-8").split("## Registered names", 1)[1]
    rows = [line for line in section.split("\n## ", 1)[0].splitlines() if line.startswith("| ")]
    table = {}
    for row in rows[2:]:  # after the header and its --- row
        kind, names = (cell.strip() for cell in row.strip("|").split("|"))
        table[kind] = set(re.findall(r"`([^`]+)`", names))
    return table


def test_the_readmes_registered_names_are_exactly_the_registry():
    assert readme_registered_names() == registered_names()


def test_every_registered_name_is_in_the_docs():
    text = " ".join(page.read_text(encoding="utf-8") for page in DOCS)
    names = set().union(*registered_names().values())
    assert {name for name in names if not re.search(rf"\b{name}\b", text)} == set()


def test_the_readme_is_at_most_250_lines():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 250


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = page.read_text(encoding="utf-8")
    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)  # no headings inside code blocks
    return {slug(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_relative_link_names_a_file_and_heading_that_exist(page):
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
        if "://" in target:
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{page_id(page)}: link to a missing file: {target}"
        if anchor:
            assert anchor in anchors(linked), f"{page_id(page)}: no heading for #{anchor}"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_config_script_and_benchmark_named_exists(page):
    text = page.read_text(encoding="utf-8")
    for config in re.findall(r"[\w/]*\w\.jsonnet\b", text):
        if "/" in config.removeprefix("training_config/"):
            continue  # another project's config (allennlp-models' training_config/lm/...)
        name = config.removeprefix("training_config/")
        assert (REPO_ROOT / "training_config" / name).exists(), f"{page_id(page)}: {config}"
    for module in re.findall(r"(?<![/(\w])benchmarks\.(?!md\b)(\w+)", text):
        assert (REPO_ROOT / "benchmarks" / f"{module}.py").exists(), f"{page_id(page)}: {module}"
    for path in re.findall(r"\b((?:scripts|benchmarks|elmo_plugin|tests)/[\w/]+\.\w+)", text):
        assert (REPO_ROOT / path).exists(), f"{page_id(page)}: {path}"


@pytest.mark.parametrize("config", sorted(CONFIG_DIR.glob("*.jsonnet")), ids=lambda path: path.name)
def test_every_config_in_training_config_is_in_the_readmes_table_and_loads(config):
    assert f"`{config.name}`" in README.read_text(encoding="utf-8").split("## Choosing a config")[1]
    assert Params.from_file(str(config)).as_dict()["trainer"]


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_complete_override_is_valid_json(page):
    """Each `-o '{...}'` without a `...` placeholder parses as one JSON object."""
    for override in re.findall(r"-o '(\{.*?\})'", page.read_text(encoding="utf-8"), re.DOTALL):
        if "..." in override:
            continue
        assert isinstance(json.loads(override), dict), f"{page_id(page)}: {override}"


@pytest.mark.parametrize("page", [README, *DOCS], ids=page_id)
def test_every_callback_list_shown_starts_with_elmo_process_settings(page):
    """A `"trainer.callbacks": [...]` replaces a config's whole list: the one shown keeps
    `elmo_process_settings` first (the folder lock, the trainer key check, out.log's full disk)."""
    text = page.read_text(encoding="utf-8")
    for callbacks in re.findall(r'"trainer\.callbacks": (\[\{.*?\}\])', text, re.DOTALL):
        assert json.loads(callbacks)[0] == {"type": "elmo_process_settings"}, page_id(page)


def test_a_wrong_encoder_input_size_stops_with_the_error_the_docs_quote():
    """pos_tagger_baseline.jsonnet's crf_tagger with an encoder 1 wider than its embedding."""
    text = " ".join((REPO_ROOT / "docs" / "elmo-in-your-model.md").read_text().split())
    quoted = re.search(r'allennlp.s error "(text field embedding dim [^"]*)"', text)[1]
    params = Params.from_file(str(CONFIG_DIR / "pos_tagger_baseline.jsonnet"))
    params["model"]["encoder"]["input_size"] += 1
    vocabulary = Vocabulary()
    vocabulary.add_tokens_to_namespace(["NOUN", "VERB"], "labels")
    with pytest.raises(ConfigurationError) as error:
        Model.from_params(params.pop("model"), vocab=vocabulary)
    assert re.fullmatch(re.sub(r"\d+", r"\\d+", quoted), str(error.value))


@pytest.mark.parametrize("page", [README, *DOCS], ids=page_id)
def test_the_docs_hold_no_commit_hashes_or_issue_numbers(page):
    text = page.read_text(encoding="utf-8")
    hashes = [
        word
        for word in re.findall(r"\b[0-9a-f]{7,40}\b", text)
        if re.search(r"[a-f]", word) and re.search(r"[0-9]", word)
    ]
    assert hashes == [], f"{page_id(page)}: {hashes}"
    assert re.findall(r"(?i)\bissue \d+|#\d+\b", text) == [], page_id(page)
