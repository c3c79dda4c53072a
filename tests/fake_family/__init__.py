"""A model family pipedit does not ship, added from outside through PIPEDIT_FAMILIES=fake_family.family
(this folder's parent on the import path): HunyuanVideo's model code under a new family name and a
new pipeline name, so that adding it needs no change to pipedit."""
