"""The moplace command line (`moplace --help` lists the commands with examples).

    moplace evaluate GRAPH --cluster PRESET_OR_FILE (--strategy FILE | --baseline NAME|all) [--json]
    moplace evaluate GRAPH --cluster pod:H100:N --plan "tp=8,pp=16,dp=128,mbs=1,gbs=2048" [--json]
    moplace search GRAPH --cluster C --searcher NAME [--set K=V] [--budget N | --time 60s] [--checkpoint F] [--json]
    moplace search GRAPH --cluster pod:H100:N --space megatron --gbs 2048 --searcher nsga2 [--workers N]
    moplace compare GRAPH --cluster C --searchers a,b [--set NAME.K=V] [--budget N | --time 60s] [--json]
    moplace sweep SWEEP.toml [--trials N] [--workers N] [--storage URL] [--dask ADDRESS] [--json]
    moplace runs [--graph G] [--json]          the searches logged to MLflow
    moplace show RUN_ID [--point K] [--json]   one search's front and figures
    moplace plot RUN_ID_OR_FRONT_JSON [--out DIR] [--point K]
    moplace ui [--port 5000]                   MLflow's UI on the store
    moplace searchers
    moplace clusters
    moplace graphs
    moplace profile MODEL_OR_PY --batch N [--device-count K | --testbed K] -o graph.json   (Keras: TensorFlow)
    moplace profile MODEL.py|hf:NAME --batch N [--seq-len S] [--dtype bf16] -o graph.json (PyTorch)
    moplace apply GRAPH (--strategy FILE | --baseline NAME) --steps N [--testbed K] [--json] (TensorFlow)
    moplace fidelity MODEL_OR_PY --batch N [--testbed 2] [-o STEM] [--json]   (TensorFlow)
    moplace zoo
    moplace calibrate GRAPH... --kind KIND -o FILE [--kernels KERNELS.json] [--json]

User errors print one line on stderr and exit 2; no tracebacks. One module per command group:
`evaluate` (`planeval`: a regular plan at scale), `search` (search, compare; `scalesearch`:
regular plans on a pod), `sweep`, `review` (runs, show, plot, ui), `catalog` (graphs, clusters, searchers), `tf` (the
TensorFlow front end) and `fidelity`; each imports what its commands need only when they run.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

from .. import __version__
from ..errors import MoplaceError, error_line
from . import calibrate, catalog, evaluate, export, fidelity, review, search, sweep, tf
from .args import Parser
from .output import undone_on_failure


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    """Warnings as one line each, like errors (Python's default adds a source line that looks
    like a traceback)."""
    kind = "" if category is UserWarning else f" ({category.__name__})"
    return f"moplace: warning{kind}: {message}\n"


def main(argv=None) -> int:
    warnings.formatwarning = _one_line_warning
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # a bad argument (one line printed), --help or --version
        return exc.code if isinstance(exc.code, int) else 2
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    try:
        with undone_on_failure():  # a refused command leaves no folder of its own behind
            code = args.run(args)
        sys.stdout.flush()  # a closed pipe shows up here, not at interpreter exit
        return code
    except BrokenPipeError:  # the reader went away (`moplace graphs | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except MoplaceError as exc:
        print(f"moplace: error: {error_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("moplace: interrupted", file=sys.stderr)
        return 130


#: what ``moplace --help`` opens with
DESCRIPTION = """\
moplace plans how one training step of a deep network runs across several GPUs: it searches
placement, order, splits, micro-batches and memory levers, and shows the trade-off front of
runtime, peak communication and peak memory."""
#: what ``moplace --help`` ends with
EXAMPLES = """examples:
  moplace graphs                      the bundled profiled graphs (and `moplace clusters`)
  moplace evaluate pipedream:resnet50 --cluster 8xV100-16GB-NVLink --baseline all
  moplace search pipedream:vgg16 --cluster 4xV100-NVLink --searcher nsga2 --out vgg16
  moplace show vgg16/front.json --where "peak_memory<=4GB" --best runtime
  moplace compare pipedream:vgg16 --cluster 4xV100-NVLink --searchers nsga2,mcmc,random
  moplace search g.json --cluster pod:H100:16384 --space megatron --gbs 2048 --searcher nsga2
                                      regular plans (TP x CP x PP x DP) at scale
  moplace runs                        the searches logged to MLflow; `moplace ui` opens them
  moplace profile mlp --batch 32 -o mlp.json    a Keras model's step, measured (TensorFlow)
  moplace profile hf:gpt2 --batch 8 -o gpt2.json   a PyTorch model's step (a .py file or
                                      hf:NAME), traced without memory, times estimated

`moplace COMMAND --help` lists a command's options. A bad input prints one line naming what is
wrong and exits 2."""


class _Help(argparse.RawDescriptionHelpFormatter):
    """The top-level help: every command's line starts in one column, the longest name's
    (argparse measures command names at a smaller indent than it prints them, so the longest
    one, ``searchers``, wrapped onto a line of its own)."""

    names_width = 0  # set once the commands are registered

    def __init__(self, prog):
        super().__init__(prog, max_help_position=24)

    def add_argument(self, action):
        super().add_argument(action)
        self._action_max_length = max(self._action_max_length, self.names_width + 4)


def _parser() -> argparse.ArgumentParser:
    p = Parser(prog="moplace", description=DESCRIPTION, epilog=EXAMPLES, formatter_class=_Help)
    p.add_argument("--version", action="version", version=f"moplace {__version__}")
    sub = p.add_subparsers(dest="command", title="commands", metavar="COMMAND")
    for group in (evaluate, search, sweep, review, catalog, tf, fidelity, export, calibrate):  # each module registers its command group
        group.add_commands(sub)
    _Help.names_width = max(map(len, sub.choices))
    return p
