"""The metric a sweep's jobs are ranked by (commands/sweep_summary.py): the task class's main metric where the task
config lists none, its first listed metric otherwise, the evaluation loss without a task."""

from plm_toolkit.commands.sweep_summary import ranking_metric


def test_a_task_without_listed_metrics_is_ranked_by_its_class_main_metric():
    assert ranking_metric({"task": {"name": "squad2"}}) == ("eval_f1", True)
    assert ranking_metric({"task": {"name": "ner"}}) == ("eval_f1", True)
    assert ranking_metric({"task": {"name": "pos"}}) == ("eval_accuracy", True)
    assert ranking_metric({"task": {"name": "kbqa"}}) == ("eval_answer_accuracy", True)


def test_listed_metrics_an_unknown_task_and_no_task():
    assert ranking_metric({"task": {"name": "sst2", "metrics": ["mcc", "accuracy"]}}) == ("eval_mcc", True)
    assert ranking_metric({"task": {"name": "seq2seq"}}) == ("eval_loss", False)
    assert ranking_metric({"task": {"name": "no_such_task"}}) == ("eval_loss", False)
    assert ranking_metric({}) == ("eval_loss", False)
    assert ranking_metric({"trainer": {"metric_for_best_model": "eval_perplexity"}}) == ("eval_perplexity", False)
