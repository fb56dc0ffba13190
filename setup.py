from setuptools import find_packages, setup

setup(
    name="elmo_plugin",
    version="0.1.0",
    description="Pretrain, export and use LSTM/transformer ELMo through the allennlp CLI.",
    packages=find_packages(include=["elmo_plugin", "elmo_plugin.*"]),
    # the CPU fast path's C++ time loops, built on first use (cpu/compiled_lstm_steps.py)
    package_data={"elmo_plugin.cpu": ["csrc/*.cpp"]},
    python_requires=">=3.11",
    # Pinned versions live in constraints.txt; `make install` installs them with --no-deps
    # because allennlp 2.10.1's metadata pins torch<1.13 (no wheel for Python 3.11).
    install_requires=["allennlp", "allennlp-models", "torch", "jsonnet", "h5py"],
)
