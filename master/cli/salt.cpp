// salt: the CLI's logic is sylvite_cli's salt_main (master/cli/salt_cmd.cpp).
#include "master/cli/common.hpp"

int main(int argc, char** argv) {
  sylvite::cli::cli_env env;
  return sylvite::cli::salt_main(argc, argv, env);
}
