"""nmt-serve: the translation server (FastAPI + uvicorn), its dynamic batching and its page."""
