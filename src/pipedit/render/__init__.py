"""`pipedit render`: a prompts file to a folder of mp4s, resumable, with a manifest."""
