"""Stage 2, the model: ModelSpec (the one model object), the model_db and config.json schemas, name resolution."""
