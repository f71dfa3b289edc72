"""ELMo's biLM (Peters et al. 2018, https://arxiv.org/abs/1802.05365; the released bilm-tf code): a character CNN
token encoder shared by a forward and a backward language model, each a stack of LSTMs with projected, clipped
states and a residual connection between layers.

Inputs are words as character ids (``data/tokenization/characters.py``: UTF-8 bytes between begin/end-of-word markers,
``<S>`` and ``</S>`` as sentence markers). The token encoder embeds the characters, max-pools convolutions of several
widths over each word (Kim et al. 2016), runs highway layers and projects to ``hidden_size``. The forward LSTMs read
left to right, the backward LSTMs right to left over the same tokens; their outputs are never mixed inside the
model. The layers a downstream task mixes (section 3.2) are ``all_hidden``: the token representation twice
([x; x], so every layer has width 2 * hidden_size), then [forward; backward] of each LSTM layer.

The biLM is stateful as in bilm-tf: ``forward`` takes each row's LSTM states from the previous batch and returns the
states after it (``memories``), so whoever calls it decides what to carry (the ``bilm`` objective across stream
windows, ``plm-embed`` across batches of sentences). The softmax over words belongs to the ``bilm`` objective.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from plm_toolkit.core.choices import choices
from plm_toolkit.core.data_schema import TokenizerKind
from plm_toolkit.core.errors import ConfigError
from plm_toolkit.core.registry import MODELS
from plm_toolkit.data.tokenization.characters import MAX_CHARACTERS, NUM_CHARACTER_IDS
from plm_toolkit.models.base import BIDIRECTIONAL, CHARACTERS, RECURRENT_MEMORY, Backbone, FamilyConfig, Representations

CnnActivation = choices("CnnActivation", "relu", "tanh")


@dataclass
class ElmoConfig(FamilyConfig):
    # Registry name of the family.
    name: str = "elmo"
    # Vocabulary that a trained tokenizer gets when data.tokenizer.kind=auto: whole words (the softmax's).
    tokenizer: TokenizerKind = TokenizerKind.word
    # Width of each character's embedding.
    char_embedding_size: int = 16
    # Character convolutions, [width, number of filters] each; each is max-pooled over the word.
    filters: list[list[int]] = field(
        default_factory=lambda: [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]]
    )
    # Highway layers over the concatenated filter outputs.
    num_highway: int = 2
    # Nonlinearity after max-pooling each convolution (the released models: relu).
    activation: CnnActivation = CnnActivation.relu
    # Characters per word, begin/end-of-word included; longer words are cut.
    max_characters: int = MAX_CHARACTERS
    # Width of the token representation and of every LSTM layer's projected output (bilm-tf's projection_dim).
    hidden_size: int = 512
    # Memory cells per LSTM layer (bilm-tf's lstm.dim); the output is projected from cell_size to hidden_size.
    cell_size: int = 4096
    # LSTM layers per direction.
    num_layers: int = 2
    # Memory cells are clipped to [-cell_clip, cell_clip]; null: no clipping.
    cell_clip: float | None = 3.0
    # Projected outputs are clipped to [-projection_clip, projection_clip]; null: no clipping.
    projection_clip: float | None = 3.0
    # Add each LSTM layer's input to its output, from the second layer on (bilm-tf's use_skip_connections).
    residual: bool = True
    # Dropout on every LSTM layer's input while training (the bilm objective also drops the top output).
    dropout: float = 0.1


class Highway(nn.Module):
    """bilm-tf's highway layer: g = sigmoid(W_carry x + b_carry); y = g * relu(W_transform x + b_transform)
    + (1 - g) * x. Note g gates the transform, not the carry, whatever the names say."""

    def __init__(self, size: int):
        super().__init__()
        self.transform = nn.Linear(size, size)
        self.carry = nn.Linear(size, size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = torch.sigmoid(self.carry(x))
        return gate * F.relu(self.transform(x)) + (1.0 - gate) * x


class CharacterEncoder(nn.Module):
    """(..., max_characters) character ids -> (..., hidden_size) context-free token representations."""

    def __init__(self, config: ElmoConfig):
        super().__init__()
        self.activation = torch.relu if config.activation == CnnActivation.relu else torch.tanh
        # Row 0 is masking (a padding token's characters), kept at zero.
        self.char_embedding = nn.Embedding(NUM_CHARACTER_IDS, config.char_embedding_size, padding_idx=0)
        self.convolutions = nn.ModuleList(
            nn.Conv1d(config.char_embedding_size, num, kernel_size=width) for width, num in config.filters
        )
        num_filters = sum(num for _, num in config.filters)
        self.highways = nn.ModuleList(Highway(num_filters) for _ in range(config.num_highway))
        self.projection = nn.Linear(num_filters, config.hidden_size)

    def forward(self, char_ids: torch.Tensor) -> torch.Tensor:
        shape = char_ids.shape
        chars = self.char_embedding(char_ids.reshape(-1, shape[-1]).long())  # (N, C, E)
        chars = chars.transpose(1, 2)  # (N, E, C)
        pooled = [self.activation(conv(chars).max(dim=-1).values) for conv in self.convolutions]  # each (N, F_i)
        x = torch.cat(pooled, dim=-1)  # (N, F)
        for highway in self.highways:
            x = highway(x)
        return self.projection(x).reshape(*shape[:-1], -1)  # (..., H)


class ProjectedLSTM(nn.Module):
    """One LSTM layer of one direction with a projected, clipped output (TF's LSTMCell with num_proj, cell_clip and
    proj_clip). Gates in PyTorch's order (input, forget, cell, output); TF's forget_bias is folded into the bias."""

    def __init__(self, input_size: int, config: ElmoConfig):
        super().__init__()
        hidden, cells = config.hidden_size, config.cell_size
        self.cell_size, self.hidden_size = cells, hidden
        self.cell_clip, self.projection_clip = config.cell_clip, config.projection_clip
        self.input_linearity = nn.Linear(input_size, 4 * cells, bias=False)
        self.state_linearity = nn.Linear(hidden, 4 * cells)
        self.state_projection = nn.Linear(cells, hidden, bias=False) if cells != hidden else None

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """x (B, T, I) in reading order; mask (B, T) bool, True on tokens (a prefix of each row); state (h, c) as
        (B, H), (B, C). Returns outputs (B, T, H), zero where masked, and each row's state after its last token."""
        h, c = state
        inputs = self.input_linearity(x)  # (B, T, 4C): every step's input term at once
        outputs = []
        for t in range(x.shape[1]):
            gates = inputs[:, t] + self.state_linearity(h)  # (B, 4C)
            i, f, g, o = gates.chunk(4, dim=-1)
            c_next = torch.sigmoid(i) * torch.tanh(g) + torch.sigmoid(f) * c
            if self.cell_clip:
                c_next = c_next.clamp(-self.cell_clip, self.cell_clip)
            h_next = torch.sigmoid(o) * torch.tanh(c_next)  # (B, C)
            if self.state_projection is not None:
                h_next = self.state_projection(h_next)  # (B, H)
            if self.projection_clip:
                h_next = h_next.clamp(-self.projection_clip, self.projection_clip)
            keep = mask[:, t, None]  # (B, 1): a padded step leaves the state as it was
            h, c = torch.where(keep, h_next, h), torch.where(keep, c_next, c)
            outputs.append(h_next * keep)
        return torch.stack(outputs, dim=1), (h, c)


def reverse_padded(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Reverse the first lengths[b] steps of each row of (B, T, ...), leaving the padding after them in place."""
    steps = torch.arange(x.shape[1], device=x.device)[None]  # (1, T)
    index = torch.where(steps < lengths[:, None], lengths[:, None] - 1 - steps, steps)  # (B, T)
    return x.gather(1, index.view(*index.shape, *([1] * (x.dim() - 2))).expand_as(x))


@MODELS.register("elmo", ElmoConfig)
class Elmo(Backbone):
    # Bidirectional as a whole (a task sees both directions; each alone is causal); reads characters; carries its
    # LSTM states from one batch to the next.
    capabilities = frozenset({BIDIRECTIONAL, CHARACTERS, RECURRENT_MEMORY})
    fields_at_least_zero = frozenset({"num_highway"})
    fields_at_least_one = frozenset({"max_characters"})
    fields_above_zero = frozenset({"cell_clip", "projection_clip"})

    def __init__(self, config: ElmoConfig):
        super().__init__()
        self.check_config(config)
        self.config = config
        self.token_encoder = CharacterEncoder(config)
        self.forward_layers = nn.ModuleList(ProjectedLSTM(config.hidden_size, config) for _ in range(config.num_layers))
        self.backward_layers = nn.ModuleList(
            ProjectedLSTM(config.hidden_size, config) for _ in range(config.num_layers)
        )
        self.dropout = nn.Dropout(config.dropout)
        self.reset_parameters()

    @classmethod
    def check_config(cls, config: ElmoConfig) -> None:
        if not config.filters or any(len(f) != 2 or min(f) < 1 for f in config.filters):
            raise ConfigError(f"model.filters={config.filters}: expected a list of [width, number] pairs")
        if max(width for width, _ in config.filters) > config.max_characters:
            raise ConfigError(f"model.filters: a filter is wider than model.max_characters={config.max_characters}")
        if config.max_characters < 3:
            raise ConfigError(f"model.max_characters={config.max_characters}: needs room for a word's markers")
        if config.cell_size < config.hidden_size:
            raise ConfigError(f"model.cell_size={config.cell_size} is smaller than model.hidden_size")

    def reset_parameters(self) -> None:
        """bilm-tf's initialization (training.py): uniform(-1, 1) characters, Kim et al.'s +-0.05 for relu filters
        (else normal with std sqrt(1 / (width * dim))), normal(0, sqrt(1 / fan_in)) highways and projection with the
        carry bias at -2 (layers start close to the identity), Glorot-uniform LSTM matrices (TF's default)."""
        encoder, config = self.token_encoder, self.config
        nn.init.uniform_(encoder.char_embedding.weight, -1.0, 1.0)
        with torch.no_grad():
            encoder.char_embedding.weight[0].zero_()
        for conv, (width, _) in zip(encoder.convolutions, config.filters, strict=True):
            if config.activation == CnnActivation.relu:
                nn.init.uniform_(conv.weight, -0.05, 0.05)
            else:
                nn.init.normal_(conv.weight, std=math.sqrt(1.0 / (width * config.char_embedding_size)))
            nn.init.zeros_(conv.bias)
        for highway in encoder.highways:
            for linear, bias in ((highway.carry, -2.0), (highway.transform, 0.0)):
                nn.init.normal_(linear.weight, std=math.sqrt(1.0 / linear.in_features))
                nn.init.constant_(linear.bias, bias)
        nn.init.normal_(encoder.projection.weight, std=math.sqrt(1.0 / encoder.projection.in_features))
        nn.init.zeros_(encoder.projection.bias)
        for layer in [*self.forward_layers, *self.backward_layers]:
            # TF draws [input; state] -> 4C as one Glorot-uniform matrix.
            fan_in = layer.input_linearity.in_features + layer.state_linearity.in_features
            bound = math.sqrt(6.0 / (fan_in + 4 * layer.cell_size))
            nn.init.uniform_(layer.input_linearity.weight, -bound, bound)
            nn.init.uniform_(layer.state_linearity.weight, -bound, bound)
            nn.init.zeros_(layer.state_linearity.bias)
            layer.state_linearity.bias.data[layer.cell_size : 2 * layer.cell_size] = 1.0  # TF's forget_bias
            if layer.state_projection is not None:
                nn.init.xavier_uniform_(layer.state_projection.weight)

    @property
    def representation_size(self) -> int:
        return 2 * self.config.hidden_size

    def zero_states(self, batch_size: int, like: torch.Tensor) -> list[torch.Tensor]:
        """States of an empty history: [h, c] of every forward layer, then of every backward layer."""
        out = []
        for _ in range(2 * self.config.num_layers):
            out.append(like.new_zeros(batch_size, self.config.hidden_size))
            out.append(like.new_zeros(batch_size, self.config.cell_size))
        return out

    def run_direction(
        self, layers: nn.ModuleList, x: torch.Tensor, mask: torch.Tensor, states: list[torch.Tensor]
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """One direction's stack over x (B, T, H) in its reading order: every layer's output, and the new states."""
        outputs, new_states = [], []
        for i, layer in enumerate(layers):
            inputs = self.dropout(x)
            x, (h, c) = layer(inputs, mask, (states[2 * i], states[2 * i + 1]))
            if self.config.residual and i > 0:
                x = x + inputs
            outputs.append(x)
            new_states += [h, c]
        return outputs, new_states

    def forward(
        self,
        char_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        memories: list[torch.Tensor] | None = None,
        backward_char_ids: torch.Tensor | None = None,
        output_all_hidden: bool = False,
        **_: torch.Tensor,
    ) -> Representations:
        """char_ids (B, T, max_characters) -> ``hidden`` (B, T, 2H): [forward; backward] of the top layer.

        ``attention_mask`` (B, T) marks tokens (right padding); by default a token is any position with a character.
        ``memories`` are the states ``memories`` of the previous call (row b continues row b). The backward LSTMs
        read each row right to left; with ``backward_char_ids`` (B, T, C) they instead read those tokens in the order
        given (a stream whose sentences are already reversed, as bilm-tf trains) and their outputs keep that order.
        ``extras`` holds the top layer of each direction; ``all_hidden`` every layer as described above; ``pooled``
        (B, 2H) the forward top layer at each row's last token and the backward one at its first.
        """
        mask = (char_ids > 0).any(dim=-1) if attention_mask is None else attention_mask.bool()  # (B, T)
        states = memories or self.zero_states(char_ids.shape[0], self.token_encoder.projection.weight)
        half = 2 * self.config.num_layers
        tokens = self.token_encoder(char_ids)  # (B, T, H)
        forward_outputs, forward_states = self.run_direction(self.forward_layers, tokens, mask, states[:half])
        if backward_char_ids is None:
            lengths = mask.sum(dim=1)  # (B,)
            reversed_tokens = reverse_padded(tokens, lengths)
            backward_outputs, backward_states = self.run_direction(
                self.backward_layers, reversed_tokens, mask, states[half:]
            )
            backward_outputs = [reverse_padded(x, lengths) for x in backward_outputs]
            backward_tokens = tokens
        else:
            backward_tokens = self.token_encoder(backward_char_ids)
            backward_outputs, backward_states = self.run_direction(
                self.backward_layers, backward_tokens, mask, states[half:]
            )
        hidden = torch.cat([forward_outputs[-1], backward_outputs[-1]], dim=-1)  # (B, T, 2H)
        # The sentence summary: the forward LSTM after the last token, the backward one after the first.
        last = (mask.sum(dim=1) - 1).clamp(min=0)  # (B,)
        rows = torch.arange(hidden.shape[0], device=hidden.device)
        pooled = torch.cat([forward_outputs[-1][rows, last], backward_outputs[-1][:, 0]], dim=-1)  # (B, 2H)
        all_hidden = None
        if output_all_hidden:
            keep = mask[..., None]
            all_hidden = [torch.cat([tokens, backward_tokens], dim=-1) * keep]
            all_hidden += [torch.cat(pair, dim=-1) for pair in zip(forward_outputs, backward_outputs, strict=True)]
        return Representations(
            hidden=hidden,
            pooled=pooled,
            all_hidden=all_hidden,
            memories=forward_states + backward_states,
            extras={"forward": forward_outputs[-1], "backward": backward_outputs[-1]},
        )
