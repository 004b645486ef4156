"""The loops: fit (epochs of training batches, validation when due), evaluation and prediction.

``fit.FitLoop`` owns what a fit changes (``progress.Progress``, the optimizers, the data position);
``step.TrainingStep`` is the whole training step, automatic or manual, in one file;
``evaluation.EvaluationLoop`` runs validation, test and predict; ``hooks`` calls the module's and
callbacks' hooks in Lightning's order; ``lifecycle`` frames every stage. (Nothing is imported here,
so that importing one of them does not import the others.)
"""
