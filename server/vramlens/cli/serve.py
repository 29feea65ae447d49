"""Run the language server (stdio by default; editors start it as `vramlens serve --stdio`)."""

from __future__ import annotations


def add_arguments(p):
    p.add_argument("--stdio", action="store_true", help="talk LSP over stdin/stdout (the default)")
    p.add_argument("--tcp", action="store_true", help="listen on a TCP socket instead of stdio")
    p.add_argument("--host", default="127.0.0.1", help="TCP host (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=2087, help="TCP port (default 2087)")
    p.add_argument(
        "--log-level",
        default="WARNING",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="log level for stderr (default WARNING)",
    )


def run(args) -> int:
    from vramlens.lsp import serve

    return serve(tcp=args.tcp, host=args.host, port=args.port, log_level=args.log_level)
