"""Adds `elmo_plugin` to allennlp's global plugins file so every `allennlp` command finds it."""

from pathlib import Path

from allennlp.common.plugins import GLOBAL_PLUGINS_FILENAME

PLUGIN_NAME = "elmo_plugin"


def register(plugins_file: str = GLOBAL_PLUGINS_FILENAME) -> bool:
    """Appends the plugin name once; returns True when the file changed."""
    path = Path(plugins_file)
    text = path.read_text() if path.exists() else ""
    if PLUGIN_NAME in text.split():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    # Not through output_file: allennlp's own plugins file, shared with other plugins, gets one
    # line appended (make install), never replaced; it is no output of a command, and a link at
    # it (a dotfiles manager's) is the user's own, so it is followed. A last line without its
    # newline is ended first, so the other plugin's name stays whole.
    with path.open("a") as plugins:
        plugins.write(("\n" if text and not text.endswith("\n") else "") + PLUGIN_NAME + "\n")
    return True


if __name__ == "__main__":
    changed = register()
    print(f"{PLUGIN_NAME} {'added to' if changed else 'already in'} {GLOBAL_PLUGINS_FILENAME}")
