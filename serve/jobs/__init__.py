"""The job service: every job in the durable store, run by the dispatcher on the engine loop,
swept when expired, watched for the event streams. Uses the contract; knows no HTTP and no Ray."""
