// salt-key: the CLI's logic is sylvite_cli's salt_key_main (master/cli/salt_key_cmd.cpp).
#include "master/cli/common.hpp"

int main(int argc, char** argv) {
  sylvite::cli::cli_env env;
  return sylvite::cli::salt_key_main(argc, argv, env);
}
