"""Studies: one-off experiments built on the skipdecode package, each a Hydra config under
``studies/conf/`` run by ``python -m studies NAME`` (``make study NAME=...``), with the code only
a study uses beside them. The package never imports this folder; a study imports the package."""
