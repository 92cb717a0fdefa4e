"""The schedule search: Hydra's Optuna sweeper over a schedule's parameters on a trained model
(no retraining per trial), each trial scored on a validation subset by measured decode speed and
quality against full (:mod:`.trial`); the trials' page, its Pareto front and the best schedule
that meets a quality floor (:mod:`.front`)."""
