"""CTranslate2 models read as data (docs/ctranslate2.md): `binary` (model.bin's index and weights), `spec` (its
TransformerSpec as this project's model), `directory` (the files a directory or an Argos package holds), `reader`
(the checkpoint)."""
