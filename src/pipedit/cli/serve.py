"""`pipedit serve`: the /v1/videos API on Ray Serve until Ctrl-C (pipedit.serve.ray_app.launch)."""

from __future__ import annotations


def add_parser(sub) -> None:
    from .flags import (add_address_flag, add_cache_flag, add_compile_flag, add_idle_expert_flag, add_lora_flags,
                        add_nodes_flag, add_speed_flags)

    p = sub.add_parser("serve", help="serve the /v1/videos API (Ray Serve) until Ctrl-C")
    p.add_argument("--config", help="YAML config; its serve section sets the defaults below")
    p.add_argument("--model-path", help="checkpoint folder (default: the config's, else the demo model)")
    p.add_argument("--host", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, help="port (default 8000)")
    p.add_argument("--data-dir", help="where jobs.sqlite and the videos live (default: <pipedit cache>/serve)")
    p.add_argument("--max-queued", type=int, help="queued jobs beyond this are refused with 429")
    p.add_argument("--database-url", help="job store URL, e.g. postgresql+psycopg://user@host/db "
                                          "(default: SQLite in the data folder)")
    p.add_argument("--num-replicas", type=int, help="Serve replicas (rank groups) sharing the job store")
    p.add_argument("--proxy-location", choices=("HeadOnly", "EveryNode"),
                   help="where Serve runs HTTP proxies: HeadOnly (default: one endpoint that outlives any worker "
                        "node) or EveryNode (one per node with a replica, behind your load balancer)")
    p.add_argument("--api-key", action="append", dest="api_keys", help="accepted Bearer key (repeatable)")
    p.add_argument("--demo-prompt", help="once healthy, render this prompt through the API and print the mp4's path")
    add_address_flag(p)
    add_nodes_flag(p)
    add_compile_flag(p)
    add_speed_flags(p)
    add_idle_expert_flag(p)
    add_lora_flags(p)
    add_cache_flag(p)
    p.set_defaults(run=run)


def _config(args):
    from .flags import base_config, lora_overrides

    config = base_config(args).with_overrides("model", path=args.model_path, compile=args.compile,
                                              idle_expert=args.idle_expert, attention=args.attention,
                                              quantize=args.quantize, **lora_overrides(args))
    config = config.with_overrides("generation", cache=args.cache)  # requests without a cache take it
    config = config.with_overrides("parallel", nodes=args.nodes)
    return config.with_overrides(
        "serve", host=args.host, port=args.port, data_dir=args.data_dir, max_queued=args.max_queued,
        database_url=args.database_url, num_replicas=args.num_replicas, proxy_location=args.proxy_location,
        api_keys=tuple(args.api_keys) if args.api_keys else None,
    )


def run(args) -> int:
    import os

    from ..serve.header_timeout import CALLBACK_ENV, environment
    from ..serve.http.body_caps import BodyCaps
    from ..serve.ray_app.launch import serve_until_interrupted

    config = _config(args)
    # Before Ray starts: its Serve proxies take their header limits from this environment (an
    # operator's own proxy callback, if set, is left alone).
    wanted = environment(config.serve.header_timeout_s, config.serve.max_header_bytes, config.serve.max_header_lines,
                         BodyCaps(config.serve.max_body_bytes, config.serve.max_upload_bytes))
    if os.environ.get(CALLBACK_ENV, wanted[CALLBACK_ENV]) == wanted[CALLBACK_ENV]:
        os.environ.update(wanted)
    return serve_until_interrupted(config, args.address, args.demo_prompt, port_given=args.port is not None)
