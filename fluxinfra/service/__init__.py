"""The gRPC Fluxion service: the matcher behind Fluence's ``fluxcli.FluxcliService`` wire API.

- :mod:`~fluxinfra.service.server` - the servicer and :func:`~fluxinfra.service.server.serve`;
- :mod:`~fluxinfra.service.client` - :class:`~fluxinfra.service.client.FluxionClient` and the
  ``python -m fluxinfra.service.client`` command line;
- :mod:`~fluxinfra.service.jobspecs` - pure jobspec builders shared with the scheduler;
- ``protos/fluxcli.proto`` and the checked-in stubs in ``_generated/``
  (regenerate with ``python -m fluxinfra.service.codegen``).

Importing this package loads no gRPC code; only ``server`` and ``client`` do.
"""
