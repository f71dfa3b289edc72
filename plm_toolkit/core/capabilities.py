"""What a backbone can serve, by name: families declare them (``Backbone.capabilities``), objectives and tasks
require them, and validation matches the two before anything is built."""

BIDIRECTIONAL = "bidirectional"  # every position sees the whole sequence (MLM, RTD, NSP)
CAUSAL = "causal"  # position t sees only positions <= t (causal LM)
SEGMENTS = "segments"  # takes token_type_ids for sentence A / B
POOLER = "pooler"  # returns a pooled summary vector (NSP, sequence classification)
TWO_STREAM = "two_stream"  # content + query streams (XLNet's permutation LM)
ENCODER_DECODER = "encoder_decoder"  # separate encoder and decoder stacks (T5, Transformer)
RECURRENT_MEMORY = "recurrent_memory"  # state carried from one batch to the next (Transformer-XL, XLNet, ELMo)
CHARACTERS = "characters"  # reads each word as character ids (``char_ids``, data/tokenization/characters.py) instead of token ids
# A family with either can continue a text (plm-generate) through ``Backbone.decoder``.
GENERATIVE = frozenset({CAUSAL, ENCODER_DECODER})
