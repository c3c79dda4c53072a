"""The Ray Serve application: the deployment whose replicas each own an engine, job service and
app; the /healthz front on the head node; placement checks, metrics, and `pipedit serve`'s launch."""
