"""benchmarks/quality_table.py's plan and report, and benchmarks/support/stages.py's cached stages,
without training anything (the benchmark's own run is tests/benchmarks/test_every_benchmark.py
and `--quick`)."""

import json
import math
import threading
import time

import pytest

from benchmarks.quality_table import (
    BERT_FINETUNE_LR,
    BERT_ROWS,
    BILM_CONFIGS,
    PROTOCOL,
    ROWS,
    TASKS,
    Budget,
    Plan,
    best_row,
    downstream_params,
    figures_of,
    holm,
    paired_comparisons,
    plot_curve,
    plus_minus,
    pretraining_stage,
    print_table,
    results_from_files,
    run_settings,
    summarize,
    targets,
    write_ewt,
    write_row_files,
)
from benchmarks.support.stages import Stage, keep_settings, run_stages
from benchmarks.support.wikitext_data import EWT, wikitext_file
from tests.helpers import REPO_ROOT, require_shared_file

FULL = Budget(None, 1200, [200, 400, 800], 3, 10, 1, 40, 5)


def conllu(sentences: int) -> str:
    return "".join(
        f"# sent_id = s{i}\n1\tword{i}\tword{i}\tNOUN\t_\t_\t0\troot\t_\t_\n\n"
        for i in range(sentences)
    )


def test_ewt_splits_keep_the_test_sentences_out_of_training_and_stopping(tmp_path):
    source = tmp_path / "ewt.conllu"
    source.write_text(conllu(2001))
    data = write_ewt(source, FULL, tmp_path)
    counts = data["counts"]
    assert (counts["train"], counts["validation"], counts["test"]) == (1200, 400, 401)
    assert [counts[f"train_{n}"] for n in (200, 400, 800)] == [200, 400, 800]

    def words(name: str) -> set[str]:
        return {line.split("\t")[1] for line in data[name].read_text().splitlines() if "\t" in line}

    assert not words("test") & (words("train") | words("validation"))
    assert not words("validation") & words("train")
    assert words("train_200") < words("train")
    assert len(data["sentences"].read_text().splitlines()) == 2001


def test_the_plan_has_every_row_task_and_seed_and_the_curve_waits_for_the_biLM_taggers(tmp_path):
    data = {"wiki": {}, "ewt": {"sentences": tmp_path / "sentences.txt"}}
    stages = {stage.name: stage for stage in Plan(ROWS, data, FULL, tmp_path).stages()}
    table = [f"{task}_{row}_seed{s}" for task in ("upos", "las") for row in ROWS for s in range(3)]
    curve = [
        f"curve_{row}_train_{size}_seed{s}"
        for row in ("best_bilm", "best_bert", "static_vectors", "no_pretraining")
        for size in (200, 400, 800)
        for s in range(3)
    ]
    pretraining = [f"pretrain_{row}" for row in ROWS if row not in ("no_pretraining", *BERT_ROWS)]
    pretraining.append("pretrain_bert_mlm")  # one BERT for both of its rows
    embedding = [f"embed_{row}" for row in ("lstm_stateless", "lstm_stateful", "transformer")]
    assert set(stages) == set(table + curve + pretraining + embedding)
    assert stages["upos_lstm_stateful_seed2"].needs == ("embed_lstm_stateful",)
    assert stages["las_allennlp_models_transformer_seed0"].needs == (
        "pretrain_allennlp_models_transformer",
    )
    assert stages["upos_no_pretraining_seed0"].needs == ()
    assert stages["las_bert_mlm_finetuned_seed1"].needs == ("pretrain_bert_mlm",)
    best = set(stages["curve_best_bilm_train_200_seed0"].needs)
    assert {f"upos_{row}_seed{s}" for row in BILM_CONFIGS for s in range(3)} <= best
    best_bert = stages["curve_best_bert_train_400_seed2"].needs
    assert best_bert == ("pretrain_bert_mlm",) + tuple(
        f"upos_{row}_seed{s}" for row in BERT_ROWS for s in range(3)
    )


def test_the_best_biLM_row_is_chosen_by_validation_not_test():
    results = {
        "upos_lstm_stateless_seed0": {"row": "lstm_stateless", "validation": 0.90, "test": 0.80},
        "upos_transformer_seed0": {"row": "transformer", "validation": 0.85, "test": 0.95},
        "upos_static_vectors_seed0": {"row": "static_vectors", "validation": 0.99, "test": 0.99},
    }
    assert best_row(results, tuple(BILM_CONFIGS)) == "lstm_stateless"
    results["upos_bert_mlm_frozen_seed0"] = {"row": "bert_mlm_frozen", "validation": 0.8}
    results["upos_bert_mlm_finetuned_seed0"] = {"row": "bert_mlm_finetuned", "validation": 0.7}
    assert best_row(results, BERT_ROWS) == "bert_mlm_frozen"


@pytest.mark.parametrize("row", ROWS)
def test_every_row_trains_the_same_model_on_training_data_only(row, tmp_path):
    pretrained = {
        "archive": "bilm.tar.gz",
        "layers": "layers.hdf5",
        "width": 256,
        "vectors": "vectors.txt",
        "words": 5000,
        "dim": 100,
        "model": "bert_folder",
    }
    data = {name: tmp_path / f"{name}.conllu" for name in ("train", "validation", "test")}
    for task, extra in (("upos", 0), ("las", 16)):
        params = downstream_params(task, row, pretrained, data, "train", 1, FULL)
        embedders = params["model"]["text_field_embedder"]["token_embedders"]
        width = {"no_pretraining": 0, "static_vectors": 100}.get(row, 256)
        assert params["model"]["encoder"]["input_size"] == 32 + width + extra
        assert set(embedders) == set(params["dataset_reader"]["token_indexers"])
        assert params["datasets_for_vocab_creation"] == ["train"]
        assert params["test_data_path"] == str(data["test"]) and params["evaluate_on_test"]
        assert (params["trainer"]["num_epochs"], params["trainer"]["patience"]) == (40, 5)
        # the protocol's training: parsers in batches of 8, every rate halved on a plateau
        assert params["data_loader"]["batch_sampler"]["batch_size"] == {"upos": 32, "las": 8}[task]
        scheduler = params["trainer"]["learning_rate_scheduler"]
        assert (scheduler["type"], scheduler["mode"], scheduler["factor"]) == (
            "reduce_on_plateau",
            "max",
            0.5,
        )
        assert [c["type"] for c in params["trainer"]["callbacks"]] == ["elmo_process_settings"]
        if row == "static_vectors":
            assert embedders["static"]["trainable"] is False
            assert params["vocabulary"]["min_pretrained_embeddings"] == {"static_vectors": 5000}
        elif row in ("lstm_stateless", "lstm_stateful", "transformer"):
            assert embedders["elmo"]["precomputed_layers"] == "layers.hdf5"
            assert embedders["elmo"]["requires_grad"] is False
        elif row in BERT_ROWS:
            indexer = params["dataset_reader"]["token_indexers"]["bert"]
            assert indexer == {
                "type": "pretrained_transformer_mismatched",
                "model_name": "bert_folder",
            }
            groups = params["trainer"]["optimizer"].get("parameter_groups")
            if row == "bert_mlm_frozen":
                assert embedders["bert"]["type"] == "pretrained_transformer_mismatched_frozen"
                assert groups is None
            else:
                assert embedders["bert"]["type"] == "pretrained_transformer_mismatched"
                assert embedders["bert"]["train_parameters"] is True
                assert groups == [
                    [["^text_field_embedder\\.token_embedder_bert\\."], {"lr": BERT_FINETUNE_LR}]
                ]
        elif row == "allennlp_models_transformer":
            assert embedders["elmo"]["type"] == "elmo_bilm_embedder"
            assert embedders["elmo"]["do_layer_norm"] is True  # its layers are not normalized
            assert "precomputed_layers" not in embedders["elmo"]
            documented = downstream_params(
                task, row, pretrained, data, "train", 1, FULL, "documented"
            )
            their = documented["model"]["text_field_embedder"]["token_embedders"]["elmo"]
            assert their["type"] == "bidirectional_lm_token_embedder"
            assert their["archive_file"] == "bilm.tar.gz"


def runs(test: list[float], validation: float = 0.5, row: str = "") -> list[dict]:
    return [
        {
            "test": t,
            "validation": validation,
            "best_epoch": 3,
            "epochs_run": 8,
            "cpu_s": 10.0,
            "row": row,
        }
        for t in test
    ]


def test_summary_targets_and_curve_png(tmp_path):
    budget = Budget(None, 1200, [200], 2, 10, 1, 40, 5)
    results = {}
    table = {
        "lstm_stateless": ([0.90, 0.92], [0.70, 0.72]),
        "allennlp_models_transformer": ([0.86, 0.87], [0.40, 0.44]),
        "static_vectors": ([0.88, 0.88], [0.69, 0.69]),
        "no_pretraining": ([0.86, 0.88], [0.66, 0.68]),
    }
    for row, (upos, las) in table.items():
        for task, values in (("upos", upos), ("las", las)):
            for seed, result in enumerate(runs(values, row=row)):
                results[f"{task}_{row}_seed{seed}"] = result
    for row, values in (("lstm_stateless", [0.80, 0.82]), ("no_pretraining", [0.60, 0.64])):
        for seed, result in enumerate(runs(values, row=row)):
            results[
                f"curve_{row if row != 'lstm_stateless' else 'best_bilm'}_train_200_seed{seed}"
            ] = result
    summary = summarize(list(table), results, budget)
    assert summary["table"]["lstm_stateless"]["upos"]["test_mean"] == 0.91
    assert summary["curve"]["lstm_stateless"]["200"]["test_mean"] == 0.81
    assert summary["curve"]["lstm_stateless"]["1200"]["test_mean"] == 0.91
    assert "static_vectors" not in summary["curve"]  # its curve runs are missing
    found = targets(summary)
    assert found["allennlp_models_not_below_no_pretraining_upos"] is True  # 0.865 vs 0.87, sd 0.014
    assert found["allennlp_models_not_below_no_pretraining_las"] is False
    assert found["best_bilm_minus_static_vectors_upos"] == 0.03
    plot_curve(summary["curve"], tmp_path / "curve.png")
    assert (tmp_path / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_paired_comparisons_pair_each_lm_row_once_with_the_others_per_seed():
    tests = {  # row -> (upos, las) test figures of seeds 0-2
        "lstm_stateless": ([0.90, 0.92, 0.91], [0.78, 0.80, 0.79]),
        "bert_mlm_frozen": ([0.86, 0.88, 0.87], [0.79, 0.80, 0.81]),
        "bert_mlm_finetuned": ([0.90, 0.93, 0.91], [0.79, 0.80, 0.80]),
        "static_vectors": ([0.85, 0.87, 0.86], [0.78, 0.81, 0.78]),
        "no_pretraining": ([0.80, 0.82, 0.81], [0.70, 0.71, 0.72]),
    }
    table = {
        row: {"upos": figures_of(runs(upos)), "las": figures_of(runs(las))}
        for row, (upos, las) in tests.items()
    }
    found = paired_comparisons({"table": table})
    pairs = [
        ("lstm_stateless", "bert_mlm_frozen"),
        ("lstm_stateless", "bert_mlm_finetuned"),
        ("lstm_stateless", "static_vectors"),
        ("lstm_stateless", "no_pretraining"),
        ("bert_mlm_frozen", "bert_mlm_finetuned"),  # once, not the other way round too
        ("bert_mlm_frozen", "static_vectors"),
        ("bert_mlm_frozen", "no_pretraining"),
        ("bert_mlm_finetuned", "static_vectors"),
        ("bert_mlm_finetuned", "no_pretraining"),
    ]
    assert set(found) == {f"{a}_vs_{b}_{task}" for a, b in pairs for task in ("upos", "las")}
    upos = found["lstm_stateless_vs_static_vectors_upos"]
    assert upos["per_seed"] == [0.05, 0.05, 0.05]  # rounded: 0.9 - 0.85 is not 0.05 in floats
    assert upos["paired_p"] == 0.0 and upos["holm_p"] == 0.0 and upos["verdict"] == "ahead"
    las = found["lstm_stateless_vs_bert_mlm_frozen_las"]
    assert las["per_seed"] == [-0.01, 0.0, -0.02] and las["difference"] == -0.01
    assert las["sds_overlap"] is True and las["verdict"] == "tie"
    one_seed = paired_comparisons(
        {
            "table": {
                r: {t: figures_of(runs([0.5])) for t in TASKS}
                for r in ("transformer", "no_pretraining")
            }
        }
    )
    assert one_seed["transformer_vs_no_pretraining_las"]["paired_p"] is None
    assert one_seed["transformer_vs_no_pretraining_las"]["verdict"] == "one seed: no test"


def test_holm_adjusts_each_p_by_its_rank_and_keeps_the_order():
    tested = {
        name: {"paired_p": p, "difference": difference}
        for name, p, difference in (
            ("a", 0.01, -0.02),
            ("b", 0.04, 0.01),
            ("c", 0.03, 0.02),
            ("d", None, 0.1),
        )
    }
    found = holm(tested)
    assert {name: c["holm_p"] for name, c in found.items()} == {
        "a": 0.03,
        "b": 0.06,
        "c": 0.06,
        "d": None,  # b: 1 x 0.04, raised to c's 2 x 0.03
    }
    assert [c["verdict"] for c in found.values()] == ["behind", "tie", "tie", "one seed: no test"]


def test_stages_run_after_their_needs_and_a_rerun_skips_finished_ones(tmp_path):
    calls = []
    lock = threading.Lock()

    def stage(name: str, needs: tuple[str, ...] = ()) -> Stage:
        def run(results: dict) -> dict:
            with lock:
                calls.append(name)
            assert set(results) == set(needs)
            return {"value": sum(r["value"] for r in results.values()) + 1}

        return Stage(name, run, needs)

    stages = [stage("c", ("a", "b")), stage("a"), stage("b", ("a",))]
    assert run_stages(stages, tmp_path, workers=2)["c"] == {"value": 4}
    assert calls.index("a") < calls.index("b") < calls.index("c")
    assert json.loads((tmp_path / "b.json").read_text()) == {"value": 2}
    (tmp_path / "c.json").unlink()
    calls.clear()
    assert run_stages(stages, tmp_path, workers=2)["c"] == {"value": 4}
    assert calls == ["c"]


def test_a_failing_stage_lets_the_running_one_finish_starts_nothing_more_and_raises(tmp_path):
    failing = threading.Event()

    def fail(_: dict) -> dict:
        failing.set()
        raise RuntimeError("broken")

    def slow(_: dict) -> dict:
        failing.wait(5)
        time.sleep(0.3)  # still running when the other stage fails
        return {"value": 1}

    stages = [
        Stage("bad", fail, cost=3.0),
        Stage("ok", slow, cost=2.0),
        Stage("never", lambda _: {}, cost=1.0),
    ]
    with pytest.raises(RuntimeError, match="broken"):
        run_stages(stages, tmp_path, workers=2)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["ok.json"]


def test_an_out_folder_made_with_other_settings_is_refused(tmp_path):
    keep_settings(tmp_path, {"seeds": 3})
    keep_settings(tmp_path, {"seeds": 3})  # the same settings: the run continues
    with pytest.raises(SystemExit, match="holds stages made with other settings"):
        keep_settings(tmp_path, {"seeds": 1})


SETTINGS = {
    "seeds": 3,
    "curve_sizes": [200],
    "max_epochs": 40,
    "protocol": 2,
    "data": {"valid.txt": "10 bytes"},
}
SMALL = Budget(None, 1200, [200], 3, 10, 1, 40, 5)


def row_results(row: str, test: list[float], validation: float, epochs: int = 8) -> dict:
    """A row's stage results as a run leaves them: pretraining, both tasks and the curve."""
    found: dict = {}
    if row != "no_pretraining":
        found[pretraining_stage(row)] = {
            "archive": f"/runs/{row}/model.tar.gz",
            "epochs_run": 10 if row == "transformer" else 6,
            "best_epoch": 10 if row == "transformer" else 5,
            "heldout_perplexity": 200.0,
            "heldout_perplexity_stateless": 210.0,
            "pretrain_cpu_s": 600.0,
            "cpu_s": 660.0,
        }
    curve = "best_bilm" if row in BILM_CONFIGS else row
    for seed, value in enumerate(test):
        run = {"test": value, "validation": validation, "cpu_s": 1.0, "row": row}
        found[f"upos_{row}_seed{seed}"] = dict(run, best_epoch=3, epochs_run=epochs)
        found[f"las_{row}_seed{seed}"] = dict(run, best_epoch=epochs - 5, epochs_run=epochs)
        found[f"curve_{curve}_train_200_seed{seed}"] = dict(
            run, test=value - 0.1, best_epoch=3, epochs_run=8
        )
    return found


def write_rows(folder, settings=SETTINGS) -> list[str]:
    """Each row written by its own command (`--rows ROW --results FOLDER`)."""
    rows = {
        "lstm_stateless": ([0.90, 0.92, 0.94], 0.80, 8),
        "transformer": ([0.90, 0.92, 0.94], 0.70, 8),  # worse by validation: not the curve's
        "static_vectors": ([0.89, 0.90, 0.91], 0.60, 8),
        "no_pretraining": ([0.85, 0.86, 0.87], 0.50, 40),  # its parsers at the cap
    }
    for row, (test, validation, epochs) in rows.items():
        write_row_files(folder, [row], row_results(row, test, validation, epochs), settings)
    return list(rows)


def test_the_table_is_built_from_row_files_with_the_best_biLMs_curve(tmp_path):
    rows = write_rows(tmp_path)
    kept = json.loads((tmp_path / "lstm_stateless.json").read_text())
    assert "archive" not in kept["runs"]["pretrain_lstm_stateless"]  # no run-folder paths
    results = results_from_files(tmp_path, rows, SETTINGS)
    summary = summarize(rows, results, SMALL)
    assert summary["table"]["lstm_stateless"]["upos"]["test_mean"] == 0.92
    assert set(summary["curve"]) == {"lstm_stateless", "static_vectors", "no_pretraining"}
    assert summary["curve"]["lstm_stateless"]["200"]["test_mean"] == 0.82


def test_holm_adjusted_comparisons_from_row_files_match_a_hand_computation(tmp_path):
    rows = write_rows(tmp_path)
    summary = summarize(rows, results_from_files(tmp_path, rows, SETTINGS), SMALL)
    found = paired_comparisons(summary)

    def two_sided_p(differences: list[float]) -> float:
        """The paired t-test's p with 2 degrees of freedom: 1 - t / sqrt(t^2 + 2)."""
        mean = sum(differences) / 3
        sd = math.sqrt(sum((d - mean) ** 2 for d in differences) / 2)
        t = mean / (sd / math.sqrt(3))
        return round(1 - t / math.sqrt(t * t + 2), 4)

    p_static = two_sided_p([0.01, 0.02, 0.03])  # t = 2 sqrt(3): 0.0742
    p_none = two_sided_p([0.05, 0.06, 0.07])  # t = 6 sqrt(3): 0.0091
    # four tests per task, the two biLM rows alike: ranks 1-2 x 4, ranks 3-4 x 2 (and x 1,
    # raised to the rank-3 figure)
    for row in ("lstm_stateless", "transformer"):
        for task in TASKS:
            none, static = (
                found[f"{row}_vs_no_pretraining_{task}"],
                found[f"{row}_vs_static_vectors_{task}"],
            )
            assert none["paired_p"] == p_none and static["paired_p"] == p_static
            assert none["holm_p"] == round(4 * p_none, 4) == 0.0364
            assert static["holm_p"] == round(2 * p_static, 4) == 0.1484
            assert (none["verdict"], static["verdict"]) == ("ahead", "tie")


def test_a_row_file_made_with_other_settings_is_refused_naming_the_file_and_setting(tmp_path):
    write_rows(tmp_path)
    write_row_files(
        tmp_path,
        ["transformer"],
        row_results("transformer", [0.9, 0.9, 0.9], 0.7),
        {**SETTINGS, "data": {"valid.txt": "11 bytes"}},
    )
    with pytest.raises(SystemExit) as refused:
        results_from_files(tmp_path, ["lstm_stateless", "transformer"], SETTINGS)
    message = str(refused.value)
    assert str(tmp_path / "transformer.json") in message and "\n" not in message
    assert "data.valid.txt: the file's '11 bytes', this build's '10 bytes'" in message


def test_a_missing_row_file_is_named_with_the_command_that_makes_it(tmp_path):
    write_rows(tmp_path)
    with pytest.raises(
        SystemExit,
        match="bert_mlm_frozen.json: missing; make it with .*--rows bert_mlm_frozen --results",
    ):
        results_from_files(tmp_path, ["lstm_stateless", "bert_mlm_frozen"], SETTINGS)


def cut_short(path):
    path.write_text(path.read_text()[:300])


def without(run):
    def edit(path):
        found = json.loads(path.read_text())
        del found["runs"][run]
        path.write_text(json.dumps(found))

    return edit


@pytest.mark.parametrize(
    "row, edit, refusal",
    [
        ("transformer", cut_short, r"transformer.json: not a row file \(JSONDecodeError: .* line "),
        (
            "transformer",
            lambda path: path.write_text((path.parent / "static_vectors.json").read_text()),
            "transformer.json: holds the results of static_vectors, not of transformer$",
        ),
        (
            "transformer",
            without("las_transformer_seed2"),
            "transformer.json: incomplete, without the run las_",
        ),
        (
            "transformer",
            without("pretrain_transformer"),
            "transformer.json: incomplete, without the run pretrain_transformer;",
        ),
        (
            "static_vectors",
            without("curve_static_vectors_train_200_seed0"),
            "static_vectors.json: 2 curve runs, not one per size and seed; .* `--rows static_",
        ),
    ],
)
def test_a_row_file_cut_short_another_rows_or_without_a_run_is_refused_in_one_line(
    tmp_path, row, edit, refusal
):
    """Not a traceback from deep in the build, and not a table or curve without the run."""
    rows = write_rows(tmp_path)
    edit(tmp_path / f"{row}.json")
    with pytest.raises(SystemExit, match=refusal) as refused:
        results_from_files(tmp_path, rows, SETTINGS)
    assert "\n" not in str(refused.value)


def test_a_row_run_alone_trains_its_own_curve_under_its_own_name(tmp_path):
    """So the two BERT rows can run one after the other in one --out (the second reuses the
    BERT): neither finds the other's curve runs among the finished stages."""
    data = {"wiki": {}, "ewt": {"sentences": tmp_path / "sentences.txt"}}
    for row in BERT_ROWS:
        stages = {stage.name: stage for stage in Plan([row], data, FULL, tmp_path).stages()}
        curve = {name for name in stages if name.startswith("curve_")}
        assert curve == {
            f"curve_{row}_train_{n}_seed{s}" for n in (200, 400, 800) for s in range(3)
        }
        assert stages[f"curve_{row}_train_200_seed0"].needs == ("pretrain_bert_mlm",)
    results = row_results("lstm_stateful", [0.9, 0.9, 0.9], 0.7)
    results = {name.replace("best_bilm", "lstm_stateful"): run for name, run in results.items()}
    summary = summarize(["lstm_stateful"], results, SMALL)  # the row's own command's table
    assert summary["curve"]["lstm_stateful"]["200"]["test_mean"] == 0.8


def test_the_build_takes_the_curve_of_the_better_bert_row_run_alone(tmp_path):
    for row, validation in (("bert_mlm_frozen", 0.6), ("bert_mlm_finetuned", 0.7)):
        found = row_results(row, [0.88, 0.89, 0.90], validation)  # curve_ROW_train_200_seed0
        write_row_files(tmp_path, [row], found, SETTINGS)
    summary = summarize(
        list(BERT_ROWS), results_from_files(tmp_path, list(BERT_ROWS), SETTINGS), SMALL
    )
    assert list(summary["curve"]) == ["bert_mlm_finetuned"]  # better by validation UPOS
    assert summary["at_cap"]["upos_curve"]["runs"] == 3  # the other row's curve runs left out


def test_runs_at_the_epoch_cap_are_counted_per_task_and_a_biLM_improving_at_its_cap_is_flagged(
    tmp_path, capsys
):
    rows = write_rows(tmp_path)
    summary = summarize(rows, results_from_files(tmp_path, rows, SETTINGS), SMALL)
    assert summary["at_cap"] == {
        "upos": {"at_cap": 3, "runs": 12},
        "las": {"at_cap": 3, "runs": 12},
        "upos_curve": {"at_cap": 0, "runs": 9},
    }
    assert summary["table"]["no_pretraining"]["las"]["at_cap"] == 3
    print_table(summary, SMALL.max_epochs)
    printed = capsys.readouterr().out
    assert "| transformer | 10 / 10, still improving at the cap |" in printed
    assert "| lstm_stateless | 5 / 6 |" in printed
    assert "| 3.0 / 40.0; 35.0 / 40.0 | 3 of 3; 3 of 3 |" in printed
    assert "runs that reached the 40-epoch cap: upos 3 of 12 (25%), las 3 of 12 (25%)" in printed


def test_the_settings_hold_the_data_files_sizes_and_hashes_the_configs_and_the_protocol(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("ELMO_PLUGIN_DATA", str(tmp_path))
    for path in (wikitext_file(), tmp_path / EWT):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("one line\n")
    settings = run_settings(FULL, "normalized")
    assert settings["protocol"] == PROTOCOL and settings["max_epochs"] == 40
    assert settings["downstream_training"]["batch_size"] == {"upos": 32, "las": 8}
    assert set(settings["configs"]) == {*BILM_CONFIGS.values(), *(c for c, _ in TASKS.values())}
    assert settings["data"]["valid.txt"].startswith("9 bytes, sha256 ")
    (tmp_path / EWT).write_text("one line.\n")
    changed = run_settings(FULL, "normalized")["data"][(tmp_path / EWT).name]
    assert changed != settings["data"][(tmp_path / EWT).name]


def committed_summary() -> dict:
    """The build of benchmarks/quality_results/ with this checkout's settings (the command's
    default budget), its rows in the command's order."""
    require_shared_file(str(EWT))
    folder = REPO_ROOT / "benchmarks" / "quality_results"
    rows = [row for row in ROWS if (folder / f"{row}.json").exists()]
    assert "no_pretraining" in rows
    settings = run_settings(FULL, "normalized")
    return summarize(rows, results_from_files(folder, rows, settings), FULL)


def test_the_committed_row_files_build_with_this_checkouts_settings():
    """benchmarks/quality_results/ holds the docs' figures: a change to a config, the data or the
    protocol that would make the build refuse them fails here, not in the next full run."""
    summary = committed_summary()
    for figures in summary["table"].values():
        for task in TASKS:
            assert len(figures[task]["test"]) == FULL.seeds


COMPARED_WITH = {
    "bert_mlm_frozen": "frozen BERT",
    "bert_mlm_finetuned": "fine-tuned BERT",
    "static_vectors": "static vectors",
    "no_pretraining": "no pretraining",
}


def comparison_table(comparisons: dict, rows: list[str], task: str) -> str:
    """The docs' table of a task's paired comparisons: per row against each column the difference
    of the test means, the Holm-adjusted p and the seeds it was ahead in; bold where not a tie."""
    lines = [
        f"| {task.upper()}: row against | " + " | ".join(COMPARED_WITH.values()) + " |",
        "| --- |" + " --- |" * len(COMPARED_WITH),
    ]
    for row in rows:
        cells = []
        for other in COMPARED_WITH:
            found = comparisons.get(f"{row}_vs_{other}_{task}")
            if found is None:  # itself, or compared in the other row's line
                cells.append("-")
                continue
            ahead = sum(difference > 0 for difference in found["per_seed"])
            cell = f"{found['difference']:+.3f} ({found['holm_p']:.2f}, {ahead}/{FULL.seeds})"
            cells.append(cell if found["verdict"] == "tie" else f"**{cell}**")
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def test_the_docs_quality_results_are_what_the_committed_row_files_build(capsys):
    """docs/benchmarks.md's table, runs at the cap, curve and paired comparisons are the build of
    benchmarks/quality_results/: a row file run again, or a figure edited by hand, fails here."""
    summary = committed_summary()
    docs = (REPO_ROOT / "docs" / "benchmarks.md").read_text()
    lines = docs.splitlines()
    print_table(summary, FULL.max_epochs)
    table = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert len(table) == 2 + len(summary["table"])
    assert [line for line in table if line not in lines] == []
    caps, prose = summary["at_cap"], " ".join(docs.split())
    for task, runs in (("las", "parsers"), ("upos", "taggers"), ("upos_curve", "curve runs")):
        assert f"{caps[task]['at_cap']} of {caps[task]['runs']} {runs}" in prose
    for row, points in summary["curve"].items():
        cells = " | ".join(plus_minus(point) for point in points.values())
        assert f"| {row} | {cells} |" in lines
    comparisons = paired_comparisons(summary)
    rows = [row for row in summary["table"] if row in BILM_CONFIGS or row in BERT_ROWS]
    for task in TASKS:
        assert comparison_table(comparisons, rows, task) in docs
