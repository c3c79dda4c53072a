"""The HTTP edge: the FastAPI app over a job service, the checks every request passes first, the
error bodies, downloads, event streams, the header time limit and the web page."""
