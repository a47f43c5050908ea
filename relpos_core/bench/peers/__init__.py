"""The peer benchmark: relpos_core side by side with the implementations users run instead.

Book: "What it costs" (chapters/11_what_it_costs.ipynb). ``python -m relpos_core.bench
--preset peers`` (or ``peers_quick``, the tests' tiny shape). One adapter file per peer
library, each importing its library inside its functions (relpos_core imports without
them; ``pip install 'relpos_core[bench]'`` installs them):

* ``xtransformers``: x-transformers' T5 bias, ALiBi and rotary with its flash and eager ``Attend``;
* ``rotary_embedding_torch``: rotary-embedding-torch and SDPA;
* ``hf``: Hugging Face's Llama rotary + SDPA, T5 attention (sdpa and eager), BLOOM's ALiBi
  and DeBERTa-v2 (log buckets), built from configs with random weights.

``run``: each contender checked against relpos_core's float64 computation first (refused
from the round with the difference otherwise), then every accepted contender timed in
interleaved rounds, forward and forward + backward, as ratios to the row's fastest.
"""
from relpos_core.bench.peers.common import Built, Contender, Row
from relpos_core.bench.peers.run import SCHEMA, format_peers, peer_contenders, run_peers

__all__ = ["Built", "Contender", "Row", "SCHEMA", "format_peers", "peer_contenders", "run_peers"]
