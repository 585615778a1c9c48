"""What a replica does to a request before its engine sees it: token-id prompts, empty prompts, error chunks.

Rules:
  token ids   a completion whose prompt is token ids is decoded with the engine's own tokenizer
              (special tokens kept) and served as that text; an id at or past the vocabulary size is a
              400 naming `prompt`; an engine without a tokenizer in this process refuses token ids with a
              400 naming `prompt` (send the prompt as text).
  empty       an empty text prompt is served as the tokenizer's beginning-of-text token (its BOS, else
              its EOS), which is what a model conditions on at the start of a document; an engine without
              a tokenizer gets the empty prompt unchanged.
  errors      an engine refusal becomes an `ErrorChunk`: a terminal Chunk that also carries the refusal's
              OpenAI `code` (context_length_exceeded, overloaded, ...), so the ingress answers with it.
"""

from __future__ import annotations

from pydantic import Field

from ..engines.protocol import Chunk, EngineError, GenerateRequest


class ErrorChunk(Chunk):
    error_code: str | None = Field(default=None, description="OpenAI error code of the refusal or failure.")


def error_chunk(exc: EngineError, replica: str | None) -> ErrorChunk:
    return ErrorChunk(
        finish_reason="error", error=str(exc), error_status=exc.status, error_param=exc.param,
        error_code=exc.code, replica=replica,
    )


def engine_tokenizer(engine):
    """The tokenizer an engine loaded in this process (the embedded engine's), or None."""
    return getattr(getattr(engine, "_loaded", None), "tokenizer", None)


def prepared(engine, request: GenerateRequest, prompt_token_ids: list[int] | None) -> GenerateRequest:
    """The request the engine serves (rules token ids and empty above); EngineError when refused."""
    tokenizer = engine_tokenizer(engine)
    if prompt_token_ids is not None:
        if tokenizer is None:
            raise EngineError(
                "token-id prompts are not served by this pool's engine; send the prompt as text",
                status=400, param="prompt", code="unsupported_parameter",
            )
        vocab = len(tokenizer)
        outside = [token for token in prompt_token_ids if token >= vocab]
        if outside:
            raise EngineError(
                f"token id {outside[0]} is outside the vocabulary (ids 0..{vocab - 1})",
                status=400, param="prompt", code="invalid_value",
            )
        text = tokenizer.decode(prompt_token_ids, skip_special_tokens=False)
        return request.model_copy(update={"prompt": text})
    if request.messages is None and not request.prompt and tokenizer is not None:
        start = tokenizer.bos_token or tokenizer.eos_token or ""
        return request.model_copy(update={"prompt": start})
    return request
