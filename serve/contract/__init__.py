"""What the video API takes and gives: the request and response schemas, the checks that turn a
create's parameters into a job's settings, the options a create may use, the client's errors.
Imports no other layer of the server."""
