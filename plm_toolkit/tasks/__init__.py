"""Fine-tuning tasks; ``plm_toolkit.registry.load_all`` imports each module, which registers its tasks in
``plm_toolkit.registry.TASKS``. (Importing them here would run ``python -m plm_toolkit.tasks.squad_metric`` with the
module already loaded, which makes runpy warn.)"""
