"""SGLang 0.5.23's own start-up argument checks, run as a server process would run them, then exit.

    python tests/sglang_double/sglang_startup.py [launch_server arguments]

Runs, with the installed SGLang's code and in its order: `prepare_server_args(argv)` (argparse, prog
"sglang serve": a bad flag exits 2 with its `error:` line), then two of the resolution rules
`ServerArgs.resolve_once()` runs, through SGLang's own `run_hook` where the pipeline calls them so:
`validate_prefill_decode_interval` (validation_hook.py: ValueError for a negative
--prefill-decode-interval) and, for `--mamba-radix-cache-strategy no_buffer`, `validate_mamba_no_buffer`
(mamba_hook.py: AssertionError unless --disable-overlap-schedule). Uncaught, so Python prints the
traceback and exits 1, as `python -m sglang.launch_server` does. The whole pipeline is not run because
its imports need torchvision, which has no CPU wheel for this torch. Exits 0 when the rules pass.
"""

import sys

from sglang.srt.arg_groups.mamba_hook import validate_mamba_no_buffer
from sglang.srt.arg_groups.resolution_hooks import run_hook
from sglang.srt.arg_groups.validation_hook import validate_prefill_decode_interval
from sglang.srt.server_args import prepare_server_args

if __name__ == "__main__":
    server_args = prepare_server_args(sys.argv[1:])
    run_hook(validate_prefill_decode_interval, server_args)
    if server_args.mamba_radix_cache_strategy == "no_buffer":
        validate_mamba_no_buffer(server_args, "Qwen3_5ForCausalLM")
    print("sglang_startup: the checked rules pass", flush=True)
