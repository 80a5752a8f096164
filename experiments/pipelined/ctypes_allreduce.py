"""Any perflab command with the host all-reduce (MPIComm.reduce_host) called through ctypes instead
of mpi4py: does the pipelined trainer's exchange thread stop its launching thread less then?
Run: mpirun -n 2 python3 experiments/pipelined/ctypes_allreduce.py sweep --name ... --mode pipelined ..."""
import sys

from perflab import cli
from perflab.train import comm

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from gil import c_allreduce  # noqa: E402

allreduce = c_allreduce()
TYPES = {"float32": "FLOAT", "float64": "DOUBLE"}


def reduce_host(self, host):
    MPI = self.MPI
    allreduce(int(MPI.IN_PLACE), host.ctypes.data, host.size, MPI._handleof(getattr(MPI, TYPES[host.dtype.name])),
              MPI._handleof(MPI.SUM), MPI._handleof(self.comm))


comm.MPIComm.reduce_host = reduce_host
sys.exit(cli.main(sys.argv[1:]))
