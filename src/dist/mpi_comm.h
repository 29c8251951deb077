// The MPI communicator: built from mpi_comm.cpp when CMake finds MPI, else no_mpi.cpp says it is absent.
#pragma once
#include <memory>

#include "bertcc/dist.h"

namespace bertcc::dist {

bool mpi_available();
// Initialises MPI (MPI_Init_thread) and returns MPI_COMM_WORLD as a Communicator.
std::unique_ptr<Communicator> make_mpi_communicator();

}  // namespace bertcc::dist
