"""Step caching: skip the transformer's later blocks on steps where the first block (FBCache)
or the modulated input (TeaCache) says the output will barely change.

The decision is a collective fact: every denoise rank holds a shard (or a CFG branch) of the
signal, so the single-device distance is a ratio of two global sums, all-reduced before anyone
decides (agree.py). Caches are per request (state.py, held by the DenoiseJob); the hook
(hook.py) wraps the blocks' forwards from outside, as diffusers' hooks do, so module names and
state_dicts stay unchanged. This package imports only distributed and errors."""
