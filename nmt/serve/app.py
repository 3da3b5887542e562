"""The ASGI application of nmt-serve (FastAPI): routes, request checks and error answers.

Every failure is a JSON ``{"error": "...", "status": "error"}`` with a 4xx status naming the problem (5xx
only for the server's own faults); no request can stop the server."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
from importlib import resources
from typing import Any, AsyncIterator, Callable, Optional, Sequence

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from pydantic import TypeAdapter
from starlette.exceptions import HTTPException as StarletteHTTPException

from nmt.api import TranslationModel, blank_translation, searched_rows, text_problem
from nmt.config.generate import GenerationConfig
from nmt.config.serve import ServeJob
from nmt.errors import NmtError
from nmt.serve.answers import native_answer, onmt_answer
from nmt.serve.batcher import DynamicBatcher, Job, QueueFull
from nmt.serve.connections import RequestWatch
from nmt.serve.request_body import ApiError, error_response, read_request
from nmt.serve.schemas import ErrorResponse, NativeRequest, NativeResponse, OnmtHypothesis, OnmtSentence

RETRY_AFTER_SECONDS = 1
_ONMT_REQUEST = TypeAdapter(list[OnmtSentence])
_NATIVE_REQUEST = TypeAdapter(NativeRequest)
_ONMT_FIELDS = list(OnmtSentence.model_fields)
_NATIVE_FIELDS = list(NativeRequest.model_fields)
_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse} for code in (400, 404, 413, 422, 503)}


class TranslationService:
    """What the routes need: the model, the batcher, the server's limits and default search."""

    def __init__(self, model: TranslationModel, batcher: DynamicBatcher, cfg: ServeJob):
        self.model = model
        self.batcher = batcher
        self.cfg = cfg
        self.defaults = dataclasses.asdict(cfg.generation)  # every request's search options start from these

    def search(self, options: dict[str, Any]) -> GenerationConfig:
        """The server's default search with a request's options on top, checked (the model keeps the checked
        configurations and their searches)."""
        for name in ("beam", "nbest"):
            if options.get(name, 0) > self.cfg.max_beam:
                raise ApiError(400, f"{name} {options[name]}: at most {self.cfg.max_beam} (nmt-serve --max-beam)")
        merged = {**self.defaults, **options}
        try:
            gen = self.model.generation_config(**merged)
        except NmtError as e:
            raise ApiError(400, str(e)) from None
        return self.search_checked(gen)

    def search_checked(self, gen: GenerationConfig) -> GenerationConfig:
        """``gen`` once its search is built for the model: a bad combination is a 400."""
        try:
            self.model.translator(gen)
        except NmtError as e:
            raise ApiError(400, str(e)) from None
        return gen

    def check_sentences(self, sentences: Sequence[str], name: str, item: Callable[[int], str]) -> None:
        """Refuse a request's sentences (the field ``name``; ``item(k)`` names the k-th) when there are none or too
        many, or one is too long or not text (a lone surrogate)."""
        limit = self.cfg.max_request_sentences
        if not sentences:
            raise ApiError(400, f"{name}: no sentences; send at least one")
        if len(sentences) > limit:
            raise ApiError(413, f"{name}: {len(sentences)} sentences; at most {limit} per request "
                                "(--max-request-sentences): split the request")
        for k, s in enumerate(sentences):
            if len(s) > self.cfg.max_sentence_chars:
                raise ApiError(413, f"{item(k)}: {len(s)} characters; at most {self.cfg.max_sentence_chars} "
                                    "per sentence (--max-sentence-chars): split it")
            problem = text_problem(s)
            if problem:
                raise ApiError(400, f"{item(k)}: {problem}")

    async def translate(self, sentences: list[str], gen: GenerationConfig, item: Callable[[int], str], *,
                        alignment: bool = False, attention: bool = False, constraints: Optional[list[list[str]]] = None,
                        ordered: bool = False, glossary: Optional[dict[str, str]] = None) -> list[Any]:
        """The Translations of ``sentences`` (``item(k)`` names the k-th in errors), searched by the batcher with
        other requests' sentences; an empty or whitespace-only sentence is "" without a search (nmt.api). Its
        ``constraints`` and the glossary's terms (the server's, and the request's ``glossary``) are forced."""
        ids = [self.model.encode(s) for s in sentences]
        limit = self.model.max_source_positions
        for k, row in enumerate(ids):
            if len(row) > limit:
                raise ApiError(422, f"{item(k)}: {len(row)} tokens after tokenization and BPE (</s> included), "
                                    f"more than the model's {limit} source positions: split the sentence")
        try:
            forced, terms = self.model.sentence_terms(sentences, ids, gen, constraints, ordered=ordered,
                                                      glossary=glossary, field="constraints",
                                                      item=lambda k: f"constraints[{k}]")
        except NmtError as e:
            raise ApiError(400, str(e)) from None
        if forced is not gen:  # the constrained search: built (and checked) once per set of options
            gen = self.search_checked(forced)
        rows = searched_rows(ids)
        found: dict[int, Any] = {}
        if rows:
            job = Job([sentences[k] for k in rows], [ids[k] for k in rows], gen, alignment=alignment,
                      attention=attention, terms=[terms[k] for k in rows])
            try:
                future = self.batcher.submit(job)
            except QueueFull as e:
                raise ApiError(503, f"server busy: {e}; retry after {RETRY_AFTER_SECONDS}s",
                               {"Retry-After": str(RETRY_AFTER_SECONDS)}) from None
            found = dict(zip(rows, await asyncio.wrap_future(future)))
        return [found[k] if k in found else blank_translation(sentences[k], alignment=alignment, terms=terms[k])
                for k in range(len(sentences))]

    def model_info(self) -> dict[str, Any]:
        """/models: what the model translates, its size, card and scores (from its model folder's manifest)."""
        from nmt.model_folder.card import read_card

        info = self.model.info
        card = read_card(self.model.path) if info else None  # a model folder's card, its size bounded
        return {"model_id": self.cfg.model_id, "loaded": True, "source_lang": self.model.source_lang,
                "target_lang": self.model.target_lang, "parameters": self.model.parameters,
                "path": self.model.path, "engine": self.model.engine.name,
                "max_source_positions": self.model.max_source_positions,
                "scores": info.get("scores"), "training": info.get("training"), "card": card,
                "default_search": {"beam": self.cfg.generation.beam, "nbest": self.cfg.generation.nbest,
                                   "lenpen": self.cfg.generation.lenpen}}


def _onmt_item(k: int) -> str:
    return f"[{k}].src"


def _native_item(k: int) -> str:
    return f"text[{k}]"


def build_app(service: TranslationService, start_batcher: bool = True) -> FastAPI:
    """The FastAPI app serving ``service`` under ``--url-root``. With ``start_batcher`` the batcher's worker runs
    in a thread while the app does; without, the caller runs it (``DynamicBatcher.run``); either way it is
    closed when the app shuts down."""
    cfg = service.cfg
    root = cfg.route_prefix()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if start_batcher:
            service.batcher.start()
        yield
        await asyncio.get_running_loop().run_in_executor(None, service.batcher.close, cfg.drain_seconds)

    app = FastAPI(title="nmt-serve", version="1", lifespan=lifespan, docs_url=f"{root}/docs",
                  openapi_url=f"{root}/openapi.json", redoc_url=None,
                  description=f"{service.model.source_lang} -> {service.model.target_lang} translation")
    # set when the server begins to stop (nmt.serve.connections.StoppingServer); a client that leaves cancels its job
    app.state.stopping = asyncio.Event()
    app.add_middleware(RequestWatch, stopping=app.state.stopping)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, e: ApiError) -> JSONResponse:
        return error_response(e.status, str(e), e.headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
        message = str(e.detail)
        if e.status_code in (404, 405):
            message = f"{message}: {request.method} {request.url.path} (the routes are listed at {root}/docs)"
        return error_response(e.status_code, message, getattr(e, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, e: RequestValidationError) -> JSONResponse:
        return error_response(400, str(e.errors()[0].get("msg", "invalid request")))

    @app.exception_handler(Exception)
    async def server_fault(request: Request, e: Exception) -> JSONResponse:
        message = str(e).splitlines()[0] if str(e) else ""
        return error_response(500, f"translation failed: {type(e).__name__}{': ' + message if message else ''}")

    def openapi_body(schema: Any) -> dict[str, Any]:
        return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}

    @app.post(f"{root}/translate", response_model=list[list[OnmtHypothesis]], responses=_ERRORS,
              openapi_extra=openapi_body(_ONMT_REQUEST.json_schema()))
    async def translate_onmt(request: Request) -> Any:
        """OpenNMT-py's request and answer: ``[{"src": ..., "id": N}]`` -> one list per n-best rank."""
        items = await read_request(request, _ONMT_REQUEST, cfg.max_body_bytes, _ONMT_FIELDS)
        for k, item in enumerate(items):
            if item.id is not None and item.id != cfg.model_id:
                raise ApiError(404, f"[{k}].id: no model with id {item.id}; this server serves model "
                                    f"{cfg.model_id}")
        sentences = [item.src for item in items]
        service.check_sentences(sentences, "request", _onmt_item)
        gen = service.search({})
        found = await service.translate(sentences, gen, _onmt_item, alignment=cfg.generation.print_alignment)
        return JSONResponse(onmt_answer(sentences, found, gen.nbest))

    @app.post(f"{root}/v1/translate", response_model=NativeResponse, responses=_ERRORS,
              openapi_extra=openapi_body(_NATIVE_REQUEST.json_schema()))
    async def translate_native(request: Request) -> Any:
        """nmt's request: sentences plus beam, n-best, alignment and attention weights on request."""
        req = await read_request(request, _NATIVE_REQUEST, cfg.max_body_bytes, _NATIVE_FIELDS)
        service.check_sentences(req.text, "text", _native_item)
        gen = service.search(req.search_options())
        found = await service.translate(req.text, gen, _native_item, alignment=req.alignment,
                                        attention=req.attention, constraints=req.constraints, ordered=req.ordered,
                                        glossary=req.glossary)
        return JSONResponse(native_answer(found, service.model.source_lang, service.model.target_lang))

    @app.api_route(f"{root}/health", methods=["GET", "HEAD"])  # HEAD: what load balancers' checks send
    async def health() -> dict[str, Any]:
        return {"status": "ok", "process": os.getpid(), **service.batcher.describe()}

    @app.get(f"{root}/models")
    async def models() -> list[dict[str, Any]]:
        return [service.model_info()]

    static = resources.files("nmt.serve") / "static"

    @app.get(f"{root}/", response_class=HTMLResponse, include_in_schema=False)
    async def page() -> HTMLResponse:
        return HTMLResponse((static / "index.html").read_text(encoding="utf-8"))

    if root:
        @app.get(root, include_in_schema=False)
        async def page_slash() -> RedirectResponse:
            return RedirectResponse(f"{root}/")

    app.mount(f"{root}/static", StaticFiles(directory=str(static)), name="static")
    return app
