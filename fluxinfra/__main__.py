from fluxinfra.cli import script

script()
