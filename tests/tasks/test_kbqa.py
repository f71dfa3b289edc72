"""task=kbqa stage by stage on hand-made knowledge bases: the readers, the tagger's labels from the subject's names,
candidate generation, the mention decision and the relation head's loss, the choice of the answer, and the metrics."""

import logging
import math

import pytest
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

from plm_toolkit.core.errors import DataError
from plm_toolkit.data.tokenization.tokenizer import vocab_from_tokenizer
from plm_toolkit.interop.pretrained import load_backbone
from plm_toolkit.tasks.base import IGNORE, summary_vector
from plm_toolkit.tasks.kbqa.data import Encoded, Question, build_features, gold_answers, read_questions
from plm_toolkit.tasks.kbqa.knowledge_base import NameIndex, find_mention, normalize, read_kb
from plm_toolkit.tasks.kbqa.metrics import kbqa_scores
from plm_toolkit.tasks.kbqa.task import KbqaConfig, KnowledgeBaseQA, choose, predicted_mention

TRIPLES = """\
territory/DE\tcurrency\tcurrency/EUR
territory/DE\tofficial_language\tlanguage/de
territory/PA\tcurrency\tcurrency/PAB
territory/PA\tcurrency\tcurrency/USD
territory/PA\tcity\tcity/Panama
city/Panama\tcountry\tterritory/PA
territory/CI\tofficial_language\tlanguage/fr
territory/NL\tofficial_language\tlanguage/nl
territory/NZ\tofficial_language\tlanguage/en
territory/NZ\tcity\tcity/Auckland
"""
NAMES = """\
territory/DE\tGermany
territory/DE\tDeutschland
territory/PA\tPanama
city/Panama\tPanama
city/Panama\tPanama City
territory/CI\tCôte d’Ivoire
territory/CI\tIvory Coast
territory/NL\tNetherlands
territory/NZ\tNew Zealand
currency/EUR\tEuro
"""


@pytest.fixture
def kb(tmp_path):
    (tmp_path / "triples.tsv").write_text(TRIPLES)
    (tmp_path / "names.tsv").write_text(NAMES)
    return read_kb(tmp_path / "triples.tsv", tmp_path / "names.tsv")


def test_kb_reads_objects_relations_names_and_degrees(kb):
    assert kb.objects["territory/PA", "currency"] == ["currency/PAB", "currency/USD"]
    assert kb.relations_of["territory/PA"] == ["currency", "city"]
    assert kb.names["territory/DE"] == ["Germany", "Deutschland"]
    assert kb.relations == ["city", "country", "currency", "official_language"]
    assert kb.degree["territory/PA"] == 4 and kb.degree["city/Panama"] == 2 and "language/xx" not in kb


def test_kb_row_with_two_fields_names_its_line(tmp_path):
    (tmp_path / "triples.tsv").write_text("a\tr\tb\n\na\tr\n")
    (tmp_path / "names.tsv").write_text("a\tA\n")
    with pytest.raises(DataError, match=rf"{tmp_path}/triples.tsv:3: 2 field\(s\), expected 3"):
        read_kb(tmp_path / "triples.tsv", tmp_path / "names.tsv")


def test_names_of_ids_absent_from_the_triples_are_counted_and_left_out(tmp_path, caplog):
    (tmp_path / "triples.tsv").write_text("a\tr\tb\n")
    (tmp_path / "names.tsv").write_text("a\tA\nx\tX\nb\tB\ny\tY\n")
    with caplog.at_level(logging.WARNING, logger="plm_toolkit"):
        kb = read_kb(tmp_path / "triples.tsv", tmp_path / "names.tsv")
    assert kb.names == {"a": ["A"], "b": ["B"]}
    assert "2 name row(s) for ids that no triple mentions were left out" in caplog.text
    assert f"{tmp_path}/names.tsv:2 (x)" in caplog.text


def test_freebase_subsets_and_simplequestions_read_as_fb_ids(tmp_path):
    # FB2M's layout: several objects in one field; SimpleQuestions' rows name the same ids with www.freebase.com/.
    (tmp_path / "fb2m.txt").write_text(
        "www.freebase.com/m/04whkz5\twww.freebase.com/book/written_work/subjects\t"
        "www.freebase.com/m/01cj3p www.freebase.com/m/02xlf\n"
    )
    (tmp_path / "names.tsv").write_text("www.freebase.com/m/04whkz5\tE\n")
    kb = read_kb(tmp_path / "fb2m.txt", tmp_path / "names.tsv")
    assert kb.objects["fb:m.04whkz5", "fb:book.written_work.subjects"] == ["fb:m.01cj3p", "fb:m.02xlf"]
    assert kb.names == {"fb:m.04whkz5": ["E"]}
    (tmp_path / "annotated_fb_data_test.txt").write_text(
        "www.freebase.com/m/04whkz5\twww.freebase.com/book/written_work/subjects\twww.freebase.com/m/02xlf\t"
        "what is the book e about\n"
    )
    (question,) = read_questions(tmp_path / "annotated_fb_data_test.txt")
    assert (question.subject, question.relation, question.answers) == (
        "fb:m.04whkz5",
        "fb:book.written_work.subjects",
        ["fb:m.02xlf"],
    )
    assert question.text == "what is the book e about" and question.line == 1
    # Every object of the pair answers it, the row's own first.
    assert gold_answers(question, kb) == ["fb:m.02xlf", "fb:m.01cj3p"]


def test_question_files_name_the_bad_line(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text('{"question": "What currency is used in Panama?", "subject": "territory/PA"}\n\n{"subject": 1}\n')
    with pytest.raises(DataError, match=rf'{path}:3: expected an object with a non-empty "question"'):
        read_questions(path)
    path.write_text('{"question": "q", "answers": "x"}\n')
    with pytest.raises(DataError, match=rf'{path}:1: "answers" must be a list'):
        read_questions(path)
    path = tmp_path / "sq.txt"
    path.write_text("s\tr\to\tq\ns\tr\tq\n")
    with pytest.raises(DataError, match=rf"{path}:2: 3 field\(s\), expected SimpleQuestions' 4"):
        read_questions(path)


# --- stage 1: the tagger's labels from the subject's names -----------------------------------------------------------
@pytest.mark.parametrize(
    "question, names, mention",
    [
        ("What currency does DEUTSCHLAND use?", ["Germany", "Deutschland"], "DEUTSCHLAND"),  # an alias, any case
        ("Is the cote d'ivoire franc gone?", ["Côte d’Ivoire"], "cote d'ivoire"),  # accents and apostrophes aside
        ("Which city is in panama city?", ["Panama", "Panama City"], "panama city"),  # the longest name
        ("What is the time zone of Grnd Turk?", ["Grand Turk"], "Grnd Turk"),  # misspelt: the closest words
        ("Which language do people speak there?", ["Panama"], None),
    ],
)
def test_mention_is_found_from_names_and_aliases(question, names, mention):
    span = find_mention(question, names, threshold=0.7)
    assert (question[span[0] : span[1]] if span else None) == mention
    assert normalize("Côte d’Ivoire") == "cote d ivoire"


def test_features_tag_the_mention_tokens_and_words(kb, tiny_checkpoint):
    tokenizer = load_backbone(tiny_checkpoint).tokenizer
    questions = [
        Question(1, "What money does Deutschland use?", "territory/DE", "currency"),
        Question(2, "Which country is it?", "territory/NL", "official_language"),  # no name of its subject
    ]
    relation_ids = {r: i for i, r in enumerate(kb.relations)}
    features, encoded, unmatched = build_features(questions, kb, relation_ids, tokenizer, 64, 0.7, with_index=True)
    first = features[0]
    tokens = [tokenizer.id_to_token(i) for i in first["input_ids"]]
    inside = [t for t, label in zip(tokens, first["labels"], strict=True) if label == 1]
    assert "".join(t.removeprefix("##") for t in inside) == "deutschland"
    assert first["labels"][0] == IGNORE and first["labels"][-1] == IGNORE  # [CLS] and [SEP] carry no target
    assert first["word_ids"][0] == 0 and first["word_ids"][1] == 1 and first["relation"] == relation_ids["currency"]
    assert encoded[0].gold_words == (3, 3) and encoded[0].word_spans[3] == (16, 27)
    assert set(features[1]["labels"]) == {IGNORE} and encoded[1].gold_words is None and unmatched == 1
    assert features[1]["index"] == 1


# --- stage 2: candidates ---------------------------------------------------------------------------------------------
def test_candidates_exact_alias_and_fuzzy(kb):
    index = NameIndex(kb)
    # Exact, case and accents aside; two entities share the name: the one in more triples first.
    assert index.candidates("PANAMA", 0.7, 10)[:2] == [("territory/PA", 1.0), ("city/Panama", 1.0)]
    assert index.candidates("deutschland", 0.7, 10)[0] == ("territory/DE", 1.0)
    assert index.candidates("Cote d'Ivoire", 0.7, 10)[0] == ("territory/CI", 1.0)
    # Misspelt: the similarity ratio of the normalized strings (2 x 10 matching characters / 21).
    (entity, score), *_ = index.candidates("New Zeland", 0.7, 10)
    assert entity == "territory/NZ" and score == pytest.approx(20 / 21)
    assert index.candidates("Zeeland", 0.9, 10) == []  # too far for the threshold
    assert len(index.candidates("Panama", 0.1, 1)) == 1  # the limit
    assert index.candidates("?!", 0.7, 10) == []


# --- stage 3: the mention decision and the heads ---------------------------------------------------------------------
def test_predicted_mention_keeps_the_run_of_the_best_token_and_widens_it_to_words():
    #                        [CLS]  which  coun  ##try  is   new   zea   ##land  [SEP]
    word_ids = torch.tensor([[0, 1, 2, 2, 3, 4, 5, 5, 0], [0, 1, 2, 2, 3, 4, 5, 5, 0]])
    probability = torch.tensor(
        [
            [0.9, 0.1, 0.6, 0.1, 0.2, 0.7, 0.95, 0.4, 0.9],  # two runs; "zea" is the most probable token
            [0.0, 0.1, 0.2, 0.1, 0.3, 0.1, 0.2, 0.45, 0.0],  # nothing tagged: the best token's word alone
        ]
    )
    mask, span = predicted_mention(probability, word_ids)
    assert span.tolist() == [[3, 4], [4, 4]]
    assert mask[0].tolist() == [False] * 5 + [True, True, True, False]  # "new zea ##land", not "coun"
    assert mask[1].tolist() == [False] * 6 + [True, True, False]  # the whole word of "##land"
    # A row without question tokens (only special ones) masks nothing and names no word.
    mask, span = predicted_mention(torch.tensor([[0.9, 0.8]]), torch.tensor([[0, 0]]))
    assert not mask.any() and span[0, 0] > span[0, 1]


def test_heads_shapes_loss_and_masked_relation_pass(kb, tiny_checkpoint, tmp_path):
    (tmp_path / "train.jsonl").write_text(
        '{"question": "What money does Deutschland use?", "subject": "territory/DE", "relation": "currency"}\n'
        '{"question": "Which city is in Panama?", "subject": "territory/PA", "relation": "city"}\n'
    )
    (tmp_path / "triples.tsv").write_text(TRIPLES)
    (tmp_path / "names.tsv").write_text(NAMES)
    loaded = load_backbone(tiny_checkpoint)
    vocab = vocab_from_tokenizer(loaded.tokenizer)
    config = KbqaConfig(kb_triples=str(tmp_path / "triples.tsv"), kb_names=str(tmp_path / "names.tsv"))
    data_cfg = OmegaConf.create(
        {"train_file": str(tmp_path / "train.jsonl"), "validation_file": None, "max_seq_len": 32}
        | {"max_train_samples": None, "max_eval_samples": None}
    )
    data = KnowledgeBaseQA.prepare_data(config, data_cfg, loaded.tokenizer, vocab)
    task = KnowledgeBaseQA(config, loaded.model, vocab, data)
    batch = task.collator()(data.train)
    seen = []
    task.encode = lambda model, b: seen.append(b["input_ids"]) or KnowledgeBaseQA.encode(task, model, b)
    task.eval()  # no dropout: the loss below is recomputed from the same logits
    task.training = True  # but the gold mention is masked, as in training
    loaded.model.eval()
    out = task(loaded.model, batch)
    plain, masked = seen
    assert torch.equal(masked, plain.masked_fill(batch["labels"] == 1, vocab.mask_id))
    assert int((masked == vocab.mask_id).sum()) == int((batch["labels"] == 1).sum()) > 0
    reps = loaded.model(input_ids=plain, attention_mask=batch["attention_mask"], token_type_ids=batch["token_type_ids"])
    mention_logits = task.mention_head(reps.hidden)
    assert mention_logits.shape == (*plain.shape, 2)
    expected = F.cross_entropy(mention_logits.flatten(0, 1), batch["labels"].flatten(), reduction="sum")
    assert out.loss_sums["mention"].item() == pytest.approx(expected.item(), rel=1e-5)
    masked_reps = loaded.model(
        input_ids=masked, attention_mask=batch["attention_mask"], token_type_ids=batch["token_type_ids"]
    )
    relation_logits = task.relation_head(summary_vector(loaded.model, masked_reps, batch["attention_mask"]))
    assert relation_logits.shape == (2, len(kb.relations))
    expected = F.cross_entropy(relation_logits, batch["relation"], reduction="sum")
    assert out.loss_sums["relation"].item() == pytest.approx(expected.item(), rel=1e-5)
    assert task.target_counts(batch) == {"mention": int((batch["labels"] != IGNORE).sum()), "relation": 2}


# --- stage 4: the answer ---------------------------------------------------------------------------------------------
def test_choice_takes_the_candidates_own_relations(kb):
    # "Panama" names a territory and a city: the city's relation "country" wins only where the question asks it.
    candidates = [("territory/PA", 1.0), ("city/Panama", 1.0)]
    choice = choose(candidates, {"country": 0.7, "currency": 0.2, "official_language": 0.1}, kb, 1.0)
    assert (choice.entity, choice.relation, choice.answers) == ("city/Panama", "country", ["territory/PA"])
    choice = choose(candidates, {"official_language": 0.8, "currency": 0.15}, kb, 1.0)  # PA has no official_language
    assert (choice.entity, choice.relation, choice.answers) == (
        "territory/PA",
        "currency",
        ["currency/PAB", "currency/USD"],
    )
    assert choice.score == pytest.approx(0.15)
    # A fuzzy entity with the likelier relation against an exact one: entity_weight sets the trade-off.
    candidates = [("territory/NZ", 0.8), ("territory/DE", 1.0)]
    relations = {"city": 0.6, "currency": 0.4}
    assert choose(candidates, relations, kb, 1.0).entity == "territory/NZ"  # 0.8 x 0.6 > 1 x 0.4
    assert choose(candidates, relations, kb, 3.0).entity == "territory/DE"  # 0.8^3 x 0.6 < 0.4
    assert choose([("territory/CI", 1.0)], {"currency": 1.0}, kb, 1.0) is None


def test_ties_go_to_the_entity_in_more_triples(kb):
    choice = choose([("city/Panama", 1.0), ("territory/PA", 1.0)], {"city": 0.5, "country": 0.5}, kb, 1.0)
    assert choice.entity == "territory/PA" and math.isclose(choice.score, 0.5)


def test_metrics_hand_computed(kb):
    def row(question, gold_words, span, candidates, choice):
        return Encoded(question, [], gold_words), span, candidates, choice, "m"

    right = choose([("territory/DE", 1.0)], {"currency": 0.9}, kb, 1.0)
    wrong_entity = choose([("territory/NL", 1.0)], {"official_language": 0.9}, kb, 1.0)
    rows = [
        row(Question(1, "a", "territory/DE", "currency"), (3, 3), (3, 3), ["territory/DE"], right),
        # the wrong entity, right relation; its answer is not German's
        row(Question(2, "b", "territory/DE", "official_language"), (1, 2), (2, 2), ["territory/NL"], wrong_entity),
        # no subject known, answers given: a hit
        row(Question(3, "c", answers=["currency/EUR", "currency/X"]), None, (0, 0), [], right),
        # the gold subject is not in the knowledge base: wrong
        row(Question(4, "d", "territory/XX", "currency", ["currency/XX"]), None, (0, 0), [], None),
    ]
    metrics, predictions = kbqa_scores(rows, kb)
    assert metrics["answer_accuracy"] == pytest.approx(2 / 4)
    assert metrics["answer_f1"] == pytest.approx((1 + 0 + 2 / 3 + 0) / 4)
    assert metrics["mention_f1"] == pytest.approx(1 / 2)
    assert metrics["entity_accuracy"] == pytest.approx(1 / 3)
    assert metrics["relation_accuracy"] == pytest.approx(2 / 3)
    assert metrics["candidate_recall"] == pytest.approx(1 / 3)
    assert predictions[1]["entity"] == "territory/NL" and predictions[1]["answers"] == ["language/nl"]
    assert predictions[3]["entity"] is None and predictions[3]["answers"] == []


def test_masking_replaces_the_mention_tokens_and_their_characters():
    from types import SimpleNamespace

    from plm_toolkit.data.tokenization.characters import word_character_ids
    from plm_toolkit.tasks.kbqa.task import MASK_WORD

    batch = {"input_ids": torch.tensor([[2, 7, 8, 3]]), "char_ids": torch.arange(4 * 6).reshape(1, 4, 6)}
    mask = torch.tensor([[False, True, True, False]])
    out = KnowledgeBaseQA.masked(SimpleNamespace(mask_id=5), batch, mask)
    assert out["input_ids"].tolist() == [[2, 5, 5, 3]]
    assert out["char_ids"][0, 1].tolist() == out["char_ids"][0, 2].tolist() == word_character_ids(MASK_WORD, 6)
    assert torch.equal(out["char_ids"][0, [0, 3]], batch["char_ids"][0, [0, 3]])


def test_evaluation_questions_that_cannot_be_right_are_counted(kb, caplog):
    from plm_toolkit.tasks.kbqa.data import count_unanswerable

    questions = [
        Question(1, "a", "territory/DE", "currency"),
        Question(2, "b", "territory/XX", "currency", ["currency/XXX"]),
        Question(5, "c"),  # neither answers nor a subject to take them from
        Question(7, "d", "territory/YY", "currency"),
    ]
    with caplog.at_level(logging.WARNING, logger="plm_toolkit"):
        count_unanswerable(questions, kb, "dev.jsonl")
    assert (
        "dev.jsonl: 2 question(s) whose gold subject is not in the knowledge base count as wrong (first: line 2)"
        in (caplog.text)
    )
    assert "dev.jsonl: 2 question(s) have no answers" in caplog.text and "(first: line 5)" in caplog.text
