#!/usr/bin/env bash
# Run on a machine with PyPI, from the repo root: fills .gpu_bundle/ with the cp312 manylinux
# x86_64 wheels that an offline GPU machine (Python 3.12 with a CUDA torch, numpy and most of the
# scientific stack preinstalled) lacks or has in a version allennlp cannot use.
# scripts/gpu_install.sh installs them there, with no index (docs/install.md: An offline GPU machine).
#
# Only what is imported on the paths we run is carried (traced with a sys.modules diff of
# `allennlp train/evaluate/predict` + import_plugins() + allennlp_models + our tests), not the
# whole lock: allennlp, allennlp-models, jsonnet, fairscale, the spaCy stack, nltk, cached_path's
# boto3 / google-cloud-storage, and transformers 4.46.3 / huggingface-hub 0.25.2 / tokenizers 0.20.3
# (allennlp needs transformers<4.47) and setuptools 80.9 (allennlp-models imports pkg_resources).
# Versions come from constraints.txt. Idempotent; prints the folder's size at the end.
#
# To keep the bundle small (about 50 MiB), each wheel is slimmed once, when it is
# fetched (same name and version, RECORD rewritten): debug info is stripped from its .so files
# (spaCy's 3.8 wheels ship it: 35 MB -> a few MB; `strip --strip-debug` keeps every symbol), and
# botocore keeps only the S3/STS service models (cached_path imports boto3 at import time, but the
# offline GPU machine never reaches S3; 16 MB -> 1 MB). SLIM=0 keeps the wheels as published.
set -euo pipefail
cd "$(dirname "$0")/.."

BUNDLE=${GPU_BUNDLE:-.gpu_bundle}
PY=${PYTHON:-python3}
# Python 3.12 to build the packages that ship only an sdist.
BUILD_PY=${BUILD_PYTHON:-$(command -v python3.12 || true)}

# Wheels published on PyPI for cp312 manylinux x86_64 (or pure Python).
WHEELS=(
  allennlp allennlp-models setuptools
  transformers huggingface-hub tokenizers
  jsonnet more-itertools base58 cached_path dill lmdb conllu ftfy wcwidth nltk py-rouge tensorboardX
  boto3 botocore s3transfer jmespath
  google-cloud-storage google-cloud-core google-api-core google-auth google-resumable-media
  googleapis-common-protos opentelemetry-api cryptography cffi defusedxml
  spacy thinc blis cymem murmurhash preshed srsly catalogue confection wasabi weasel
  pydantic pydantic_core annotated-types typing-inspection
)
# Only an sdist on PyPI (or no cp312 wheel): built here with Python 3.12.
SDISTS=(fairscale termcolor word2number)

PLATFORMS=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_26_x86_64 manylinux_2_24_x86_64
           manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_12_x86_64 manylinux2010_x86_64
           manylinux_2_5_x86_64 manylinux1_x86_64)

SLIM=${SLIM:-1}

slim_wheel() {  # WHEEL -> rewrites it in place, smaller (see above); no-op when nothing shrinks
  "$PY" - "$1" <<'PYEOF'
import base64, hashlib, os, shutil, subprocess, sys, tempfile, zipfile
wheel = sys.argv[1]
name = os.path.basename(wheel).split("-")[0].lower()
tmp = tempfile.mkdtemp()
try:
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(tmp)
        order = [i.filename for i in zf.infolist() if not i.is_dir()]
    changed = False
    if name == "botocore":
        data = os.path.join(tmp, "botocore", "data")
        for entry in os.listdir(data):
            if os.path.isdir(os.path.join(data, entry)) and entry not in ("s3", "sts"):
                shutil.rmtree(os.path.join(data, entry))
                changed = True
    for rel in order:
        path = os.path.join(tmp, rel)
        if ".so" in os.path.basename(rel) and os.path.exists(path):
            before = os.path.getsize(path)
            subprocess.run(["strip", "--strip-debug", path], check=True)
            changed |= os.path.getsize(path) < before
    if not changed:
        sys.exit(0)
    record = next(r for r in order if r.endswith(".dist-info/RECORD"))
    kept = [r for r in order if os.path.exists(os.path.join(tmp, r))]
    lines = []
    for rel in kept:
        if rel == record:
            continue
        blob = open(os.path.join(tmp, rel), "rb").read()
        digest = base64.urlsafe_b64encode(hashlib.sha256(blob).digest()).rstrip(b"=").decode()
        lines.append(f"{rel},sha256={digest},{len(blob)}")
    lines.append(f"{record},,")
    with open(os.path.join(tmp, record), "w") as out:
        out.write("\n".join(lines) + "\n")
    # .dist-info last, as the wheel spec recommends.
    kept.sort(key=lambda r: (".dist-info/" in r, r == record))
    new = wheel + ".tmp"
    with zipfile.ZipFile(new, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        for rel in kept:
            zf.write(os.path.join(tmp, rel), rel)
    os.replace(new, wheel)
finally:
    shutil.rmtree(tmp)
PYEOF
}

norm() { echo "$1" | tr 'A-Z' 'a-z' | sed -E 's/[-_.]+/_/g'; }

pin() {  # NAME -> NAME==VERSION from constraints.txt
  local want line
  want=$(norm "$1")
  while IFS= read -r line; do
    line=${line%%#*}; line=${line// /}
    [[ $line == *==* ]] || continue
    if [[ $(norm "${line%%==*}") == "$want" ]]; then echo "$line"; return; fi
  done < constraints.txt
  echo "gpu_bundle: $1 is not pinned in constraints.txt" >&2; return 1
}

have_wheel() {  # NAME VERSION -> true if a wheel for exactly that version is in the bundle
  local prefix f
  prefix="$(norm "$1")-$2-"
  for f in "$BUNDLE"/*.whl; do
    [[ -e $f ]] || continue
    f=$(basename "$f")
    [[ "$(norm "${f%%-*}")-$(echo "$f" | cut -d- -f2)-" == "$prefix" ]] && return 0
  done
  return 1
}

mkdir -p "$BUNDLE"
declare -A keep=()
platform_args=()
for p in "${PLATFORMS[@]}"; do platform_args+=(--platform "$p"); done

for name in "${WHEELS[@]}" "${SDISTS[@]}"; do
  spec=$(pin "$name")
  version=${spec##*==}
  keep[$(norm "$name")]=$version
  if have_wheel "$name" "$version"; then continue; fi
  fetched=$(mktemp -d)
  if [[ " ${SDISTS[*]} " == *" $name "* ]]; then
    [[ -x $BUILD_PY ]] || { echo "gpu_bundle: need a Python 3.12 to build $spec (BUILD_PYTHON)" >&2; exit 1; }
    echo "gpu_bundle: building $spec"
    "$BUILD_PY" -m pip wheel -q --disable-pip-version-check --no-deps -w "$fetched" "$spec"
  else
    echo "gpu_bundle: downloading $spec"
    "$PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
      --python-version 3.12 --implementation cp "${platform_args[@]}" -d "$fetched" "$spec"
  fi
  for whl in "$fetched"/*.whl; do
    [[ $SLIM == 0 ]] || slim_wheel "$whl"
    mv "$whl" "$BUNDLE"/
  done
  rm -rf "$fetched"
  have_wheel "$name" "$version" || { echo "gpu_bundle: no wheel for $spec in $BUNDLE" >&2; exit 1; }
done

# Drop wheels that are no longer wanted (another version, or a package taken off the list).
for f in "$BUNDLE"/*; do
  [[ -e $f ]] || continue
  base=$(basename "$f")
  n=$(norm "${base%%-*}")
  v=$(echo "$base" | cut -d- -f2)
  if [[ $base != *.whl || "${keep[$n]:-}" != "$v" ]]; then
    echo "gpu_bundle: removing stale $base"
    rm -rf "$f"
  fi
done

count=$(ls "$BUNDLE"/*.whl | wc -l)
echo "gpu_bundle: $count wheels, $(du -sh "$BUNDLE" | cut -f1) in $BUNDLE ($(du -sb "$BUNDLE" | cut -f1) bytes)"

# The code to measure the training step against, in the same GPU call (gpu_run.sh's baseline):
# .gpu_baseline/ holds BASELINE_REF's files (default: the last commit before the training step
# had fixed shapes and no host reads). BASELINE_REF= (empty) leaves it out.
BASELINE_REF=${BASELINE_REF-91960a3}
rm -rf .gpu_baseline
if [[ -n $BASELINE_REF ]]; then
  mkdir .gpu_baseline
  git archive "$BASELINE_REF" elmo_plugin benchmarks training_config scripts | tar -x -C .gpu_baseline
  echo "gpu_bundle: .gpu_baseline/ holds $BASELINE_REF ($(du -sh .gpu_baseline | cut -f1))"
fi
