#include "tools/cli_common.h"
namespace bertcc::tools {
void add_bench(CLI::App&) {}
}
