"""Every command the README and docs/ show a user runs here, as written, on tiny data.

What runs: each page's fenced `bash` and `python` blocks, in page order, in one fresh working
directory per page, and the commands in the README's task table. A block that cannot run here
(a GPU, several hosts, hours, a download) carries the line `<!-- not run: REASON -->` directly
above its opening fence; its `allennlp` commands are still parsed by allennlp's own argument
parser and their configs loaded with their `-o`, its `make` targets and benchmark flags checked.
A block in any other language than bash, python or jsonnet (configs, not run) fails. An inline
`allennlp SUBCOMMAND ...` in the text must name a subcommand and options it has.

How the commands meet tiny data, without changing a flag, subcommand or config name:
- the working directory holds the paths the docs use (`corpus/train/*.txt`, `train.conllu`,
  `sentences.txt`, ...) as tiny files, `training_config/` as the repository's, and, where a page
  uses a biLM it does not train itself, the session's tiny biLM under the page's name for it
  (`GIVEN`);
- the `allennlp` on PATH is a client of tests/forked_allennlp.py, the tests' fork server:
  allennlp's CLI with the tiny sizes of the command's config (`TINY_SIZES`) merged into its
  `-o` (`with_tiny_sizes` says exactly what changes).
Blocks are read with mktestdocs' `grab_code_blocks`; the marker line above a fence, which it does
not return, is moved into the block as its first line before (`NOT_RUN`).
"""

import argparse
import gzip
import importlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import redirect_stdout
from io import StringIO
from pathlib import Path
from typing import NamedTuple, Optional

import pytest
from allennlp.commands import parse_args
from allennlp.commands.subcommand import Subcommand
from allennlp.common import Params
from mktestdocs import grab_code_blocks

from elmo_plugin.commands.elmo_export import export_archive
from tests.cli.test_elmo_continue_cli import published_folder
from tests.forked_allennlp import FAILURES_ENV, SOCKET_ENV, TINY_SIZES_ENV, with_tiny_sizes
from tests.helpers import (
    REPO_ROOT,
    TINY_LSTM_OVERRIDES,
    TINY_TAGGER_OVERRIDES,
    allennlp_server,
    forked_allennlp_script,
)

README = REPO_ROOT / "README.md"
PAGES = [README, *sorted((REPO_ROOT / "docs").glob("*.md"))]
LANGUAGES = ("bash", "python", "jsonnet")  # jsonnet blocks are config excerpts: never run
NOT_RUN = re.compile(r"^[ \t]*<!-- not run: (.*?) -->\n([ \t]*)(```\w*\n)", re.MULTILINE)
NOT_RUN_LINE = "# not run: "


class Block(NamedTuple):
    language: str
    code: str
    not_run: Optional[str]  # the marker's reason; None: the test runs it


def page_id(page: Path) -> str:
    return str(page.relative_to(REPO_ROOT))


def fenced_blocks(page: Path) -> list[Block]:
    """The page's fenced blocks in order, each with its language and its not-run reason."""
    text = NOT_RUN.sub(rf"\2\3\2{NOT_RUN_LINE}\1\n", page.read_text(encoding="utf-8"))
    by_language = {language: grab_code_blocks(text, lang=language) for language in LANGUAGES}
    blocks = []
    for code in grab_code_blocks(text, lang=None):
        language = next((name for name in LANGUAGES if code in by_language[name][:1]), "?")
        if language != "?":
            by_language[language].pop(0)
        first, _, rest = code.partition("\n")
        if first.startswith(NOT_RUN_LINE):
            blocks.append(Block(language, rest, first.removeprefix(NOT_RUN_LINE)))
        else:
            blocks.append(Block(language, code, None))
    return blocks


def readme_task_commands() -> str:
    """The `allennlp ...` commands of the README's task table, in row order, one per line."""
    section = README.read_text(encoding="utf-8").split("## What do you want to do?")[1]
    table = section.split("\n## ")[0]
    rows = [line for line in table.splitlines() if line.startswith("| ")][2:]
    return "\n".join(
        command for row in rows for command in re.findall(r"`(allennlp [^`]+)`", row.split("|")[2])
    )


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_fenced_block_is_bash_python_or_jsonnet_and_every_marker_has_a_reason(page):
    blocks = fenced_blocks(page)
    assert [block.language for block in blocks if block.language not in LANGUAGES] == [], (
        f"{page_id(page)}: a fenced block in another language (tag it bash, python or jsonnet)"
    )
    text = page.read_text(encoding="utf-8")
    markers = re.findall(r"^[ \t]*<!-- not run:.*-->[ \t]*$", text, re.MULTILINE)
    marked = [block for block in blocks if block.not_run is not None]
    assert len(marked) == len(markers), (
        f"{page_id(page)}: a `<!-- not run: REASON -->` line not directly above a fence"
    )
    assert all(block.not_run.strip() for block in marked), (
        f"{page_id(page)}: a marker without a reason"
    )


# ---- blocks not run here: parsed and loaded --------------------------------------------------


def command_lines(code: str) -> Iterator[list[str]]:
    """Each command line of a shell block as words: continuations (a trailing backslash, or a
    synopsis's indented next line) joined, comments and leading VAR=value assignments dropped,
    shell variables read as 0 (a Slurm task id)."""
    for line in re.sub(r"\\\n|\n(?=[ \t])", " ", code).splitlines():
        words = shlex.split(re.sub(r"\$\{?\w+\}?", "0", line), comments=True)
        while words and re.fullmatch(r"\w+=\S*", words[0]):
            words = words[1:]
        if words:
            yield words


def flags(words: list[str]) -> list[str]:
    """The options named in a command's words: `-s`, `--layers`, `[--pool`, `[--tf32|--no-tf32]`."""
    return re.findall(r"(?<![\w-])--?[a-z][\w-]*", " ".join(words))


def help_text(run: Callable[[], object]) -> str:
    """What `run` prints before argparse's --help exits."""
    text = StringIO()
    with redirect_stdout(text), pytest.raises(SystemExit):
        run()
    return text.getvalue()


def allennlp_parse(argv: list[str]) -> argparse.Namespace:
    """`allennlp ARGV` parsed by allennlp's own parser, nothing run (SystemExit on an error)."""
    saved = sys.argv
    sys.argv = ["allennlp", *argv]
    try:
        return parse_args(prog="allennlp")[1]
    finally:
        sys.argv = saved


def subcommand_options(name: str) -> set[str]:
    """The option strings of `allennlp NAME` (`--include-package` as allennlp adds it)."""
    assert name in Subcommand.list_available(), f"no subcommand allennlp {name}"
    subparser = Subcommand.by_name(name)().add_subparser(argparse.ArgumentParser().add_subparsers())
    return {*subparser._option_string_actions, "--include-package"}


def check_options(argv: list[str]) -> None:
    """The subcommand exists and has every option the words name."""
    options = subcommand_options(argv[0])
    missing = [flag for flag in flags(argv) if flag not in options]
    assert missing == [], f"allennlp {argv[0]} has no option {', '.join(missing)}"


def check_allennlp_command(argv: list[str]) -> None:
    """A usage synopsis (`[--flag ...]`): each flag is one of the subcommand's. A command: it
    parses, and a training config loads with its `-o`."""
    if any(word.startswith("[") or word == "..." for word in argv):
        check_options(argv)
        return
    try:
        args = allennlp_parse(argv)
    except SystemExit as error:
        pytest.fail(f"allennlp does not parse `allennlp {shlex.join(argv)}` (exit {error.code})")
    config = getattr(args, "param_path", None) or getattr(args, "config_file", None)
    if config:
        Params.from_file(str(REPO_ROOT / config), getattr(args, "overrides", "") or "")


def check_not_run_command(words: list[str]) -> None:
    if words[0] == "allennlp":
        check_allennlp_command(words[1:])
    elif words[0] == "make":
        makefile = (REPO_ROOT / "Makefile").read_text(encoding="utf-8")
        for target in (word for word in words[1:] if "=" not in word):
            assert re.search(rf"^{target}:", makefile, re.MULTILINE), f"no make target {target}"
    elif len(words) > 2 and words[1] == "-m" and words[2].startswith("benchmarks."):
        main = importlib.import_module(words[2]).main
        options = help_text(lambda: main(["--help"]))
        missing = [flag for flag in flags(words[3:]) if flag not in options]
        assert missing == [], f"{words[2]} has no option {', '.join(missing)}"


NOT_RUN_BLOCKS = [
    pytest.param(block.code, id=f"{page_id(page)}:{index}")
    for page in PAGES
    for index, block in enumerate(fenced_blocks(page))
    if block.language == "bash" and block.not_run is not None
]


@pytest.mark.parametrize("code", NOT_RUN_BLOCKS)
def test_the_commands_of_a_block_not_run_here_parse_and_their_configs_load(code):
    for words in command_lines(code):
        check_not_run_command(words)


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_allennlp_command_in_the_text_names_a_subcommand_and_its_options(page):
    """The inline `allennlp SUBCOMMAND ...` of the prose and tables, not run: each subcommand
    exists and has each option named after it."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
    for command in re.findall(r"`allennlp ([a-z][\w-]*)( [^`]*)?`", text):
        words = [command[0], *re.sub(r"'[^']*'", "JSON", command[1]).split()]
        check_options(words)


# ---- blocks run here ------------------------------------------------------------------------

SENTENCES = ["The file is open .", "", "Return the name of the file .", "The file is open ."]


ONE_EPOCH_LSTM = {**TINY_LSTM_OVERRIDES, "trainer.num_epochs": 1}
# config file name (or `elmo-continue`) -> the keys merged into a documented command's `-o`: the
# sizes of the tests' tiny biLM (tests/conftest.py's `tiny_bilm_archive`), one epoch, the CPU.
TINY_SIZES = {
    "elmo_lstm.jsonnet": ONE_EPOCH_LSTM,
    # plain `allennlp train` of it states the demo architecture: the tiny biLM's instead
    "elmo_lstm_continue.jsonnet": ONE_EPOCH_LSTM,
    # elmo-continue takes the architecture from the options file: nothing of it is added
    "elmo-continue": {"data_loader.batch_size": 16, "trainer.num_epochs": 1},
    "elmo_lstm_original.jsonnet": {
        **{
            key: value for key, value in ONE_EPOCH_LSTM.items() if not key.startswith("data_loader")
        },
        "model.num_samples": 20,
        "data_loader.batch_size": 16,
        "trainer.cuda_device": -1,
    },
    "pos_tagger_elmo.jsonnet": {**TINY_TAGGER_OVERRIDES, "trainer.num_epochs": 1},
    "classifier_elmo.jsonnet": {
        "model.seq2vec_encoder.input_size": TINY_TAGGER_OVERRIDES["model.encoder.input_size"],
        "model.seq2vec_encoder.hidden_size": 32,
        "trainer.num_epochs": 1,
    },
}


@pytest.fixture(scope="session")
def docs_allennlp(tmp_path_factory) -> Path:
    """A folder holding the `allennlp` the documented commands run: a client of the session's
    fork server, a command a process of its own."""
    return forked_allennlp_script(tmp_path_factory.mktemp("docs_allennlp")).parent


def command_env() -> dict[str, str]:
    """The environment of the documented commands: this checkout's code, one thread, quiet."""
    return dict(
        os.environ,
        PYTHONPATH=str(REPO_ROOT),
        PYTHONWARNINGS="ignore",
        OMP_NUM_THREADS="1",
        TOKENIZERS_PARALLELISM="false",
    )


@pytest.fixture(scope="session")
def docs_inputs(tiny_corpus, tiny_tagged_data, tmp_path_factory) -> Path:
    """The user's input files under the names the docs give them, tiny."""
    folder = tmp_path_factory.mktemp("docs_inputs")
    train, heldout = tiny_corpus / "train" / "shard_0.txt", tiny_corpus / "valid.txt"
    links = {
        "corpus/train/shard_0.txt": train,
        "corpus/heldout.txt": heldout,
        "corpus/test.txt": heldout,
        "domain/shard_0.txt": train,
        "domain_heldout.txt": heldout,
        "my/text/shard_0.txt": train,
        "my/valid.txt": heldout,
        "new/text/shard_0.txt": train,
        "new/valid.txt": heldout,
        "train.conllu": tiny_tagged_data / "train.conllu",
        "dev.conllu": tiny_tagged_data / "valid.conllu",
        "zh_gsd-ud-train.conllu": tiny_tagged_data / "train.conllu",
        "zh_gsd-ud-dev.conllu": tiny_tagged_data / "valid.conllu",
        "training_config": REPO_ROOT / "training_config",
        "fixtures/classification": REPO_ROOT / "fixtures" / "classification",
    }
    for name, target in links.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).symlink_to(target)
    text = "\n".join(SENTENCES) + "\n"
    (folder / "sentences.txt").write_text(text, encoding="utf-8")
    (folder / "corpus.txt.gz").write_bytes(gzip.compress(text.encode()))
    (folder / ".allennlp_plugins").write_text("elmo_plugin\n")  # as `make install` registers it
    return folder


@pytest.fixture(scope="session")
def tiny_elmo_files(tiny_bilm_archive, tmp_path_factory) -> Path:
    """The tiny biLM exported (options.json, weights.hdf5, vocab.txt, softmax.hdf5)."""
    folder = tmp_path_factory.mktemp("docs_elmo_files") / "my_elmo"
    export_archive(str(tiny_bilm_archive), str(folder))
    return folder


class Page(NamedTuple):
    """A page's working directory, and what its prerequisites are made from."""

    workspace: Path
    allennlp: Path  # holds the `allennlp` script
    bilm: Path  # the session's tiny biLM archive
    elmo_files: Path  # ... exported

    def link(self, name: str, target: Path) -> None:
        (self.workspace / name).parent.mkdir(parents=True, exist_ok=True)
        (self.workspace / name).symlink_to(target)

    def run_shell(self, code: str) -> None:
        """A shell block, as mktestdocs' bash executor runs it (`bash -e -u`, here with
        pipefail), in the workspace with the tests' `allennlp` first on PATH."""
        failures = self.workspace.parent / "failed_commands.txt"
        env = dict(command_env(), PATH=f"{self.allennlp}:{os.environ['PATH']}")
        env.update({TINY_SIZES_ENV: json.dumps(TINY_SIZES), FAILURES_ENV: str(failures)})
        server = allennlp_server()
        if server is not None:
            env[SOCKET_ENV] = server
        result = subprocess.run(
            ["bash", "-e", "-u", "-o", "pipefail", "-c", code],
            cwd=self.workspace,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=900,
        )
        failed = failures.read_text(encoding="utf-8") if failures.exists() else ""
        assert result.returncode == 0 and not failed, (
            f"this documented command failed (exit {result.returncode}):\n{code}\n{failed}"
            f"--- its output (end) ---\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
        )


def trained_bilm(page: Page) -> None:
    page.link("runs/my_elmo/model.tar.gz", page.bilm)


def published_elmo(page: Page) -> None:
    """The tiny biLM as a published download: options and weights renamed, no vocab.txt."""
    published_folder(page.elmo_files, page.workspace / "elmo_2x4096", with_vocab=False)


def exported_elmo(page: Page) -> None:
    page.link("my_elmo", page.elmo_files)


def embedding_inputs(page: Page) -> None:
    """MODEL: the tiny biLM; vectors.hdf5: an `elmo-embed` of sentences.txt (pooled)."""
    page.link("MODEL", page.bilm)
    page.run_shell("allennlp elmo-embed MODEL sentences.txt vectors.hdf5 --pool mean")


def manylangs_model(page: Page) -> None:
    """A tiny ELMoForManyLangs folder, its ELMo width the tiny biLM's, 50 characters a token."""
    from tests.elmo_files.manylangs_reference import make_manylangs_folder

    folder = page.workspace / "zhs.model"
    make_manylangs_folder(folder, projection_dim=16, dim=32, max_characters=50)


# What a page's commands use but do not make themselves, put in place before they run.
GIVEN: dict[str, list[Callable[[Page], None]]] = {
    "README.md": [published_elmo],
    "docs/adapting.md": [published_elmo, exported_elmo],
    "docs/elmo-in-your-model.md": [trained_bilm],
    "docs/embedding.md": [trained_bilm],
    "docs/embedding-options.md": [embedding_inputs],
    "docs/other-languages.md": [manylangs_model],
}


def runnable(page: Path) -> list[Block]:
    """The page's blocks the test runs, in order (the README's: then its task table)."""
    blocks = [
        block
        for block in fenced_blocks(page)
        if block.not_run is None and block.language in ("bash", "python")
    ]
    if page == README:
        blocks.append(Block("bash", readme_task_commands(), None))
    return blocks


@pytest.mark.parametrize("page", [page for page in PAGES if runnable(page)], ids=page_id)
def test_the_pages_commands_run_as_written_on_tiny_data(
    page, docs_allennlp, docs_inputs, tiny_bilm_archive, tiny_elmo_files, tmp_path, monkeypatch
):
    workspace = tmp_path / "workspace"
    shutil.copytree(docs_inputs, workspace, symlinks=True)
    context = Page(workspace, docs_allennlp, tiny_bilm_archive, tiny_elmo_files)
    for give in GIVEN.get(page_id(page), []):
        give(context)
    monkeypatch.chdir(workspace)
    for block in runnable(page):
        if block.language == "bash":
            context.run_shell(block.code)
        else:  # as mktestdocs' python executor, in the workspace
            exec(compile(block.code, f"{page_id(page)}, a python block", "exec"), {})


def test_the_tiny_sizes_only_add_keys_to_the_one_override():
    argv = ["train", "training_config/elmo_lstm.jsonnet", "-s", "out", "-o", '{"a": 1}', "-r"]
    tiny = with_tiny_sizes(argv, TINY_SIZES)
    assert tiny[:5] + tiny[6:] == argv[:5] + argv[6:]
    assert json.loads(tiny[5])["a"] == 1 and json.loads(tiny[5])["trainer.num_epochs"] == 1
    embed = ["elmo-embed", "MODEL", "in.txt", "out.hdf5"]
    assert with_tiny_sizes(embed, TINY_SIZES) == embed
