"""The configuration of `nmt-serve`: the model, its default search, the HTTP side, batching and limits."""

from __future__ import annotations

import re
from dataclasses import dataclass

from nmt.config.generate import TranslateJob
from nmt.errors import ConfigError
from nmt.fields import opt

SERVE = "server"
# one path segment of --url-root: RFC 3986's path characters, without percent-escapes (a route is matched on the
# decoded path, so "/a%2Fb" would not be the route it looks like)
URL_SEGMENT = re.compile(r"[A-Za-z0-9._~!$&'()*+,;=:@-]+")


@dataclass
class ServeJob(TranslateJob):
    """`nmt-serve MODEL_DIR`: translate over HTTP (OpenNMT-py's /translate and a native API), with a page at /.

    The generation flags (--beam, --lenpen, ...) are the defaults of every request; a native request may
    set its own beam and n-best. --max-tokens / --batch-size bound the batches formed from concurrent
    requests."""

    host: str = opt("127.0.0.1", "Address to listen on (0.0.0.0: every interface).", group=SERVE)
    port: int = opt(5000, "TCP port to listen on (0: any free port, printed at start).", low=0, high=65535,
                    group=SERVE)
    url_root: str = opt("", "Path prefix of every route, e.g. /translator for OpenNMT-py's paths "
                            "(/translator/translate).", group=SERVE)
    model_id: int = opt(100, "The model id OpenNMT-py clients send with each sentence (\"id\"); another id is a "
                             "404.", group=SERVE)
    workers: int = opt(1, "Server processes sharing the port, each with its own copy of the model and its own "
                          "batching (CTranslate2's inter_threads); --threads is per process [default: the cores "
                          "shared out], and a process searching while the others idle borrows their threads. On a "
                          "CPU, 2 serve many concurrent clients faster than 1 process with 2 threads "
                          "(docs/serving.md).", low=1, high=64, group=SERVE)
    batch_wait_ms: float = opt(0.0, "How long an idle server waits for more sentences before it starts searching "
                                    "(sentences that come later join the running search anyway).",
                               low=0, high=10000, group=SERVE)
    max_queue: int = opt(2048, "Sentences waiting to be translated at most; beyond, requests get 503 with "
                               "Retry-After.", low=1, group=SERVE)
    max_request_sentences: int = opt(256, "Sentences per request at most (413 beyond).", low=1, group=SERVE)
    max_sentence_chars: int = opt(4000, "Characters per sentence at most (413 beyond).", low=1, group=SERVE)
    max_beam: int = opt(32, "The largest beam (and n-best) a request may ask for (400 beyond).", low=1, group=SERVE)
    max_body_bytes: int = opt(4 << 20, "Request body size at most, in bytes (413 beyond).", low=1, group=SERVE)
    drain_seconds: float = opt(30.0, "On SIGTERM/Ctrl-C: how long in-flight requests may take to finish before the "
                                     "server exits.", low=0, group=SERVE)

    def route_prefix(self) -> str:
        """--url-root as routes start with it: "" or "/translator" (one leading slash, no trailing one); a
        ConfigError unless it is a plain path: a leading "/", no query, fragment, empty, "." or ".." segment."""
        root = self.url_root
        if not root or root == "/":
            return ""
        why = None
        if not root.startswith("/"):
            why = "does not start with /"
        else:
            segments = root[1:].removesuffix("/").split("/")
            bad = next((s for s in segments if s in ("", ".", "..") or not URL_SEGMENT.fullmatch(s)), None)
            if bad == "":
                why = "has an empty segment (//)"
            elif bad in (".", ".."):
                why = f"has a {bad!r} segment"
            elif bad is not None:
                why = f"segment {bad!r} is not plain path text"
        if why:
            raise ConfigError(f"--url-root {root}: {why}; give a path such as /translator (a leading /, then letters, "
                              "digits and -._~ between slashes; no ?, #, % or spaces)")
        return "/" + root.strip("/")
