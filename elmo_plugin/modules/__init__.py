from elmo_plugin.modules.elmo_char_cnn import ElmoCharCnn
from elmo_plugin.modules.elmo_lstm import ElmoLstm
from elmo_plugin.modules.elmo_transformer import ElmoTransformer
