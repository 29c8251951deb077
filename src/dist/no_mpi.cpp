// Built when CMake found no MPI (BERTCC_MPI=OFF or AUTO without libopenmpi-dev).
#include "bertcc/error.h"
#include "dist/mpi_comm.h"

namespace bertcc::dist {

bool mpi_available() { return false; }

std::unique_ptr<Communicator> make_mpi_communicator() {
  fail("this bertcc was built without MPI; install libopenmpi-dev and rebuild with cmake -DBERTCC_MPI=ON");
}

}  // namespace bertcc::dist
