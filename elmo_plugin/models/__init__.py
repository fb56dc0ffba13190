from elmo_plugin.models.elmo_bilm import ElmoBiLm
