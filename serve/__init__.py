"""The server: OpenAI's video API over the engine, on Ray Serve. Four layers, each importing only
the ones before it (tests/test_import_graph.py checks it):

- contract/: what the API takes and gives (schemas, checked parameters, options, client errors);
- jobs/: the job service over the durable store (dispatcher, sweeper, event hub); no HTTP, no Ray;
- http/: the FastAPI app over a job service (request guard, routes, streams, the web page);
- ray_app/: the Ray Serve application, the /healthz front and `pipedit serve`'s launch.

deployment.py and header_timeout.py here are the import paths Ray is given by name (documented).
"""
