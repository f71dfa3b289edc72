"""SQuAD features on the real data: answers survive the trip to tokens and back through the offsets (also when a
window cuts them), decoding recovers them, and malformed files stop with the file and place."""

import json
import logging

import numpy as np
import pytest
import torch

from plm_toolkit.core.errors import DataError
from plm_toolkit.data.tokenization.tokenizer import load_tokenizer, vocab_from_tokenizer
from plm_toolkit.models.bert import Bert, BertConfig
from plm_toolkit.tasks.base import TaskData
from plm_toolkit.tasks.squad.data import SquadConfig, build_features, read_squad
from plm_toolkit.tasks.squad.metric import normalize_answer, squad_evaluate
from plm_toolkit.tasks.squad.task import QuestionAnswering, SquadEvalInfo

# Short windows, so that many contexts need several and some windows cut an answer.
CONFIG = SquadConfig(doc_stride=32, max_query_length=24)
MAX_SEQ_LEN = 96


@pytest.fixture(scope="module")
def real(shared_data_module):
    examples, contexts = read_squad(shared_data_module / "squad2" / "cs224n-dev-v2.0.json")
    tokenizer = load_tokenizer(shared_data_module / "models" / "bert-base-uncased" / "vocab.txt")
    examples = [e for e in examples if e.context < 120]  # the first articles: ~1,000 questions
    vocab = vocab_from_tokenizer(tokenizer)
    features, windows, offsets = build_features(examples, contexts, tokenizer, vocab, CONFIG, MAX_SEQ_LEN, False)
    return examples, contexts, tokenizer, vocab, features, windows, offsets


@pytest.fixture(scope="module")
def shared_data_module():
    from tests.conftest import SHARED_DATA

    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


def span_text(feature, window, contexts, offsets, example):
    first = window.first_token + feature["start_positions"] - window.context_start
    last = window.first_token + feature["end_positions"] - window.context_start
    spans = offsets[example.context]
    return contexts[example.context][spans[first][0] : spans[last][1]]


def test_answer_offsets_round_trip(real):
    examples, contexts, _, _, features, windows, offsets = real
    assert len(examples) > 900 and len(features) > 2 * len(examples)  # most contexts need several windows
    labelled = exact = 0
    for feature, window in zip(features, windows, strict=True):
        example = examples[window.example]
        assert feature["input_ids"][window.cls_index] == 101  # [CLS] first, BERT's layout
        assert len(feature["input_ids"]) <= MAX_SEQ_LEN
        if feature["start_positions"] == window.cls_index:
            continue
        labelled += 1
        answer = example.answers[0][0]
        text = span_text(feature, window, contexts, offsets, example)
        assert answer in text or normalize_answer(answer) == normalize_answer(text), (answer, text)
        exact += text == answer
    # Tokens can be wider than an answer that ends inside a word ("1990" of "1990s"); that is rare.
    assert labelled > 400 and exact / labelled > 0.97, (exact, labelled)


def test_windows_that_cut_the_answer_point_at_cls(real):
    examples, _, _, _, features, windows, offsets = real
    cut = whole = 0
    for feature, window in zip(features, windows, strict=True):
        example = examples[window.example]
        if not example.answers:
            assert feature["start_positions"] == feature["end_positions"] == window.cls_index
            continue
        text, start = example.answers[0]
        spans = offsets[example.context]
        tokens = [i for i, (a, b) in enumerate(spans) if b > start and a < start + len(text)]
        inside = [window.first_token <= t < window.first_token + window.length for t in tokens]
        if all(inside):
            whole += 1
            assert feature["start_positions"] == window.context_start + tokens[0] - window.first_token
            assert feature["end_positions"] == window.context_start + tokens[-1] - window.first_token
        elif any(inside):  # the window holds part of the answer only
            cut += 1
            assert feature["start_positions"] == feature["end_positions"] == window.cls_index
    assert cut > 10 and whole > 400, (cut, whole)


def test_decoding_recovers_the_gold_answers(real):
    examples, contexts, _, vocab, features, windows, offsets = real
    width = max(len(f["input_ids"]) for f in features)
    start = np.full((len(features), width), -10.0, dtype=np.float32)
    end = start.copy()
    for row, (feature, window) in enumerate(zip(features, windows, strict=True)):
        start[row, feature["start_positions"]] += 20.0
        end[row, feature["end_positions"]] += 20.0
        if not examples[window.example].answers:
            start[row, window.cls_index] = end[row, window.cls_index] = 15.0
    model = Bert(BertConfig(vocab_size=vocab.size, hidden_size=36, num_layers=1, num_heads=3, intermediate_size=37))
    info = SquadEvalInfo(examples, contexts, windows, offsets, width)
    task = QuestionAnswering(CONFIG, model, vocab, TaskData([], features, eval_info=info))
    metrics = task.finish_evaluation(
        {
            "start_logits": torch.from_numpy(start),
            "end_logits": torch.from_numpy(end),
            "feature_index": torch.arange(len(features)),
        }
    )
    assert metrics["total"] == len(examples)
    assert metrics["NoAns_exact"] == 100.0
    assert metrics["HasAns_f1"] > 99.0 and metrics["HasAns_exact"] > 97.0, metrics
    assert set(task.artifacts) == {"predictions.json", "null_odds.json", "span_predictions.json"}
    assert task.artifacts["predictions.json"][examples[0].qid] in ("", *[a for a, _ in examples[0].answers])


def test_eval_results_score_the_predictions_written_beside_them(real):
    """With tau = 6.6 and null odds between about 5 and 9, eval_results.json once said HasAns 0 / NoAns 100 while
    predictions.json answered half the questions: the official keys must score exactly the files released beside
    them (predictions.json alone, and with null_odds.json at the official threshold 1.0)."""
    examples, contexts, _, vocab, features, windows, offsets = real
    width = max(len(f["input_ids"]) for f in features)
    rng = np.random.default_rng(0)
    start = rng.normal(0.0, 0.5, (len(features), width)).astype(np.float32)
    end = rng.normal(0.0, 0.5, (len(features), width)).astype(np.float32)
    for row, (feature, window) in enumerate(zip(features, windows, strict=True)):
        start[row, feature["start_positions"]] += 3.0
        end[row, feature["end_positions"]] += 3.0
        start[row, window.cls_index] = end[row, window.cls_index] = 5.0 + 2.0 * rng.random()  # s_null - best ~ 4..9
    model = Bert(BertConfig(vocab_size=vocab.size, hidden_size=36, num_layers=1, num_heads=3, intermediate_size=37))
    info = SquadEvalInfo(examples, contexts, windows, offsets, width)
    config = SquadConfig(doc_stride=32, max_query_length=24, null_score_diff_threshold=6.6)
    task = QuestionAnswering(config, model, vocab, TaskData([], features, eval_info=info))
    logits = {"start_logits": torch.from_numpy(start), "end_logits": torch.from_numpy(end)}
    metrics = task.finish_evaluation({**logits, "feature_index": torch.arange(len(features))})
    predictions, null_odds = task.artifacts["predictions.json"], task.artifacts["null_odds.json"]
    answered = sum(bool(p) for p in predictions.values())
    assert 0.2 * len(predictions) < answered < 0.8 * len(predictions)
    assert all((null_odds[q] > 0) == (predictions[q] == "") for q in predictions)
    golds = {e.qid: [a for a, _ in e.answers] for e in examples}
    official = ("exact", "f1", "total", "HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1")
    alone, rescored = squad_evaluate(golds, predictions), squad_evaluate(golds, predictions, null_odds)
    assert {k: metrics[k] for k in official} == {k: alone[k] for k in official}
    assert {k: metrics[k] for k in rescored} == rescored
    assert metrics["HasAns_exact"] > 50 and metrics["NoAns_exact"] > 50  # once HasAns 0 and NoAns 100
    assert metrics["span_best_exact"] >= metrics["best_exact"] - 1e-9


def write(tmp_path, text):
    path = tmp_path / "bad.json"
    path.write_text(text)
    return path


def test_malformed_json_names_file_and_line(tmp_path):
    path = write(tmp_path, '{"data": [\n  {"title": "x",\n   "paragraphs": [}\n]}')
    with pytest.raises(DataError, match=rf"{path}:3:\d+: not valid JSON"):
        read_squad(path)


def test_missing_field_names_the_question(tmp_path):
    data = {"data": [{"paragraphs": [{"context": "abc", "qas": [{"id": "1", "answers": []}]}]}]}
    path = write(tmp_path, json.dumps(data))
    with pytest.raises(DataError, match=r"data\[0\]\.paragraphs\[0\]\.qas\[0\]: missing 'question'"):
        read_squad(path)


def test_answer_start_that_misses_its_text_is_skipped_and_counted(tmp_path, caplog, shared_data_module):
    qas = [
        {"id": "good", "question": "who?", "answers": [{"text": "Rollo", "answer_start": 11}]},
        {"id": "bad", "question": "who?", "answers": [{"text": "Rollo", "answer_start": 3}]},
    ]
    data = {"data": [{"paragraphs": [{"context": "Their king Rollo swore fealty.", "qas": qas}]}]}
    path = write(tmp_path, json.dumps(data))
    examples, contexts = read_squad(path)
    tokenizer = load_tokenizer(shared_data_module / "models" / "bert-base-uncased" / "vocab.txt")
    vocab = vocab_from_tokenizer(tokenizer)
    with caplog.at_level(logging.WARNING, logger="plm_toolkit"):
        features, _, _ = build_features(examples, contexts, tokenizer, vocab, CONFIG, 64, True, str(path))
    assert len(features) == 1
    assert "1 question(s) whose answer_start does not match" in caplog.text and "id=bad" in caplog.text


def test_sliding_windows_cover_the_context_with_bert_strides():
    from plm_toolkit.tasks.squad.data import sliding_windows

    assert sliding_windows(10, 4, 3) == [(0, 4), (3, 4), (6, 4)]
    assert sliding_windows(3, 4, 3) == [(0, 3)]
    assert sliding_windows(10, 4, 8) == [(0, 4), (4, 4), (8, 2)]  # a stride longer than a window never skips


def test_impossible_false_without_answers(tmp_path, caplog):
    """Refused in a training file (naming the question's id); counted, and scored as unanswerable, in evaluation."""
    qas = [
        {"id": "ok", "question": "who?", "answers": [{"text": "Rollo", "answer_start": 11}], "is_impossible": False},
        {"id": "odd", "question": "who?", "answers": [], "is_impossible": False},
    ]
    path = write(tmp_path, json.dumps({"data": [{"paragraphs": [{"context": "Their king Rollo swore.", "qas": qas}]}]}))
    with pytest.raises(DataError, match=r"qas\[1\] \(id=odd\): is_impossible is false but there are no answers"):
        read_squad(path, training=True)
    with caplog.at_level(logging.WARNING, logger="plm_toolkit"):
        examples, _ = read_squad(path)
    assert "1 question(s) with is_impossible: false but no answers" in caplog.text and "id=odd" in caplog.text
    assert examples[1].answers == []


def test_no_usable_training_example_names_the_file_and_the_reasons(tmp_path, shared_data_module):
    qas = [{"id": "bad", "question": "who?", "answers": [{"text": "Rollo", "answer_start": 3}]}]
    path = write(tmp_path, json.dumps({"data": [{"paragraphs": [{"context": "Their king Rollo swore.", "qas": qas}]}]}))
    examples, contexts = read_squad(path, training=True)
    tokenizer = load_tokenizer(shared_data_module / "models" / "bert-base-uncased" / "vocab.txt")
    vocab = vocab_from_tokenizer(tokenizer)
    with pytest.raises(DataError, match=rf"no usable training examples in {path} \(1 skipped: answer_start does not"):
        build_features(examples, contexts, tokenizer, vocab, CONFIG, 64, True, str(path))
