#!/usr/bin/env bash
# Run ON the offline GPU machine, from the repo root, after scripts/gpu_bundle.sh filled
# .gpu_bundle/ elsewhere. Makes a venv over the image's Python (--system-site-packages: its CUDA
# torch, numpy, triton, h5py, scipy, ... are used as they are), installs the bundled wheels and
# this package with no index and no resolver, and registers the plugin with allennlp.
#   GPU_VENV     where the venv goes (default .venv-gpu)
#   BASE_PYTHON  the Python that holds torch (default python3)
# Then: source "$GPU_VENV/bin/activate" (or put "$GPU_VENV/bin" first on PATH).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${GPU_VENV:-.venv-gpu}
BASE_PYTHON=${BASE_PYTHON:-python3}
BUNDLE=${GPU_BUNDLE:-.gpu_bundle}

shopt -s nullglob
wheels=("$BUNDLE"/*.whl)
if (( ${#wheels[@]} == 0 )); then
  echo "gpu_install: no wheels in $BUNDLE (run scripts/gpu_bundle.sh on a machine with PyPI)" >&2
  exit 1
fi

if [[ ! -x $VENV/bin/python ]]; then
  # A Python without ensurepip (Debian/Ubuntu's without python3-venv) gets a venv without pip;
  # the base's own pip then runs in it through the .pth file below.
  "$BASE_PYTHON" -m venv --system-site-packages "$VENV" ||
    "$BASE_PYTHON" -m venv --clear --system-site-packages --without-pip "$VENV"
fi
# The image's python3 may itself be a venv: --system-site-packages reaches only the
# interpreter's own site-packages, not that venv's torch. A .pth file adds the base venv's
# site-packages (with the .pth files in it) after ours, so the bundled wheels take precedence.
venv_site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$BASE_PYTHON" - "$venv_site/zz_gpu_base_site_packages.pth" <<'EOF'
import site, sys
dirs = site.getsitepackages() if sys.prefix != sys.base_prefix else []
with open(sys.argv[1], "w") as pth:
    for d in dirs:
        pth.write(f"import site; site.addsitedir({d!r})\n")
EOF
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
# --no-index --no-deps: nothing is fetched and no resolver can swap the image's torch or numpy.
# The bundled transformers / huggingface-hub / tokenizers / setuptools shadow the image's newer ones
# inside the venv only.
"${PIP[@]}" install -q --no-index --no-deps "${wheels[@]}"
"${PIP[@]}" install -q --no-index --no-deps --no-build-isolation -e .
# allennlp-models' rc/tools/narrativeqa.py (imported by every `allennlp` command) downloads nltk's
# punkt + wordnet unless tokenizers/punkt is found; on a machine with no network at all that
# attempt can only fail (or hang on DNS). An empty stand-in in $VENV/nltk_data (on nltk's default
# path) skips it; nothing we run uses punkt.
mkdir -p "$VENV/nltk_data/tokenizers/punkt"
(cd "$VENV" && bin/python -m elmo_plugin.commands.register_plugin)

"$VENV/bin/python" - <<'EOF'
import allennlp.version, numpy, torch, transformers
print("torch", torch.__version__)
print("numpy", numpy.__version__)
print("allennlp", allennlp.version.VERSION)
print("transformers", transformers.__version__)
print("cuda available", torch.cuda.is_available())
EOF
echo "gpu_install: ready; use $VENV/bin/python and $VENV/bin/allennlp"
