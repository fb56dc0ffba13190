"""Adds `elmo_plugin` to allennlp's global plugins file so every `allennlp` command finds it."""

from pathlib import Path

from allennlp.common.plugins import GLOBAL_PLUGINS_FILENAME

PLUGIN_NAME = "elmo_plugin"


def register(plugins_file: str = GLOBAL_PLUGINS_FILENAME) -> bool:
    """Appends the plugin name once; returns True when the file changed."""
    path = Path(plugins_file)
    listed = path.read_text().split() if path.exists() else []
    if PLUGIN_NAME in listed:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    # Not through output_file: allennlp's own plugins file, shared with other plugins, gets one
    # line appended (make install), never replaced; it is no output of a command.
    with path.open("a") as plugins:
        plugins.write(PLUGIN_NAME + "\n")
    return True


if __name__ == "__main__":
    changed = register()
    print(f"{PLUGIN_NAME} {'added to' if changed else 'already in'} {GLOBAL_PLUGINS_FILENAME}")
