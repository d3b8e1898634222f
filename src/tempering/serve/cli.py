"""`tempering serve ...`: services other programs drive over HTTP.

tempering serve tinker [CONFIG.yaml] [key=value ...]   the Tinker API (tinker SDK, tinker-cookbook) on
                                                       tempering's models; keys: `tempering config serve`
"""

from __future__ import annotations

from tempering.config import Parser, from_args, parse, print_config
from tempering.errors import UserError


def parser() -> Parser:
    ap = Parser(prog="tempering serve", description=__doc__.split("\n")[0])
    p = ap.command(
        "tinker",
        "the Tinker API on tempering's models, losses and sampler. Keys: `tempering config serve`",
        schema="tempering.serve.tinker.config:TinkerConfig",
    )
    p.set_defaults(fn=tinker)
    return ap


def tinker(args) -> int:
    cfg = from_args(args)
    if args.print_config:
        return print_config(cfg)
    try:
        import fastapi  # noqa: F401
        import tinker  # noqa: F401
        import uvicorn
    except ImportError as e:
        raise UserError(
            f"tempering serve tinker needs {e.name}: pip install 'tempering[tinker]' (Python >= 3.11)"
        ) from None
    from tempering.serve.tinker.app import create_app
    from tempering.serve.tinker.engine import Engine

    engine = Engine(cfg)
    names = {name: engine.tokenizer_folder(name) for name in cfg.models}  # fails here on a bad alias, before serving
    engine.start()
    print(
        f"tempering serve tinker: http://{cfg.host}:{cfg.port} (TINKER_BASE_URL), state in {engine.state}", flush=True
    )
    for name, folder in names.items():
        print(f"  {name} -> {cfg.models[name]} (tokenizer: {folder})", flush=True)
    uvicorn.run(create_app(cfg, engine), host=cfg.host, port=cfg.port, log_level=cfg.log_level)
    return 0


def main(argv: list[str]) -> int:
    args = parse(parser(), argv)
    return int(args.fn(args) or 0)
