// salt-key: manage minion keys in the master's key directories (Salt 3008 flags and
// output), then tell the running master (ipc key_event) so it drops/rotates sessions.
#include <iostream>

#include "master/cli/common.hpp"
#include "master/cli/key_ops.hpp"
#include "master/ipc_protocol.hpp"

using namespace sylvite;

int main(int argc, char** argv) {
  const std::string usage = "salt-key [options]";
  CLI::App app{"salt-key is used to manage Salt authentication keys", "salt-key"};
  app.set_version_flag("--version", cli::version_line("salt-key"));
  std::string config_dir = "/etc/salt";
  cli::add_config_dir_flag(app, config_dir);
  cli::keys::key_options o;
  cli::output_flags of;
  std::string user, saltfile, rotate = "True", preserve, log_level, log_file, log_file_level;
  bool quiet = false, hard_crash = false;
  app.add_option("--saltfile", saltfile, "Specify the path to a Saltfile (accepted, ignored).");
  app.add_option("-u,--user", user, "Specify user to run salt-key (accepted; no user switch is done).");
  app.add_flag("--hard-crash", hard_crash, "Accepted for compatibility.");
  app.add_flag("-q,--quiet", quiet, "Suppress output.");
  app.add_flag("-y,--yes", o.yes, "Answer \"Yes\" to all questions presented. Default: False.");
  app.add_option("--rotate-aes-key", rotate,
                 "Setting this to False prevents the master from refreshing the key session when keys are "
                 "deleted or rejected. Default: True.");
  app.add_option("--preserve-minions", preserve, "Accepted for compatibility.");
  cli::add_output_flags(app, of, "salt-key");
  auto* act = app.add_option_group("Actions");
  act->add_option("-l,--list", o.list,
                  "List the public keys. The args 'pre', 'un', and 'unaccepted' will list unaccepted/unsigned "
                  "keys. 'acc' or 'accepted' will list accepted/signed keys. 'rej' or 'rejected' will list "
                  "rejected keys. 'den' or 'denied' will list denied keys. Finally, 'all' will list all keys.");
  act->add_flag("-L,--list-all", o.list_all, "List all public keys. Deprecated: use \"--list all\".");
  act->add_option("-a,--accept", o.accept, "Accept the specified public key (globs are supported).");
  act->add_flag("-A,--accept-all", o.accept_all, "Accept all pending keys.");
  act->add_option("-r,--reject", o.reject, "Reject the specified public key (globs are supported).");
  act->add_flag("-R,--reject-all", o.reject_all, "Reject all pending keys.");
  act->add_flag("--include-all", o.include_all, "Include rejected/accepted keys when accepting/rejecting.");
  act->add_flag("--include-accepted", o.include_accepted, "Include accepted keys when rejecting.");
  act->add_flag("--include-rejected", o.include_rejected, "Include rejected keys when accepting.");
  act->add_flag("--include-denied", o.include_denied, "Include denied keys when accepting/rejecting.");
  act->add_option("-p,--print", o.print, "Print the specified public key.");
  act->add_flag("-P,--print-all", o.print_all, "Print all public keys.");
  act->add_option("-d,--delete", o.del, "Delete the specified key. Globs are supported.");
  act->add_flag("-D,--delete-all", o.delete_all, "Delete all keys.");
  act->add_option("-f,--finger", o.finger, "Print the specified key's fingerprint.");
  act->add_flag("-F,--finger-all", o.finger_all, "Print all keys' fingerprints.");
  auto* lg = app.add_option_group("Logging Options");
  lg->add_option("--log-level", log_level, "Console logging log level (accepted).");
  lg->add_option("--log-file", log_file, "Log file path (accepted).");
  lg->add_option("--log-file-level", log_file_level, "Logfile logging log level (accepted).");

  std::vector<std::string> stray;  // Salt ignores stray positional arguments (except with -D)
  app.add_option("args", stray)->group("");
  if (auto rc = cli::parse_cli(app, argc, argv, usage)) return *rc;
  if (o.list && !(o.list->rfind("acc", 0) == 0 || o.list->rfind("pre", 0) == 0 || o.list->rfind("un", 0) == 0 ||
                  o.list->rfind("rej", 0) == 0 || o.list->rfind("den", 0) == 0 || o.list->rfind("all", 0) == 0))
    return cli::usage_error("salt-key", usage, "'" + *o.list + "' is not a valid argument to '--list'");
  if (o.delete_all && !stray.empty())
  {
    std::cerr << "Error: Delete all takes no arguments. Use -d to delete specified keys\n";
    return cli::ex_ok;  // Salt's salt_key() prints the SaltInvocationError and exits 0
  }
  {
    std::string r = rotate;
    for (auto& ch : r) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    o.rotate_aes_key = !(r == "false" || r == "0" || r == "no");
  }

  auto cfg = cli::load_config(config_dir);
  if (!cfg) return cli::ex_client_error;
  o.out = of.out == "key" ? "" : of.out;
  o.oopt = cli::make_output_options(of);

  cli::keys::key_io io{std::cin, std::cout, std::cerr, {}};
  io.notify = [&](const std::string& act_name, const std::vector<std::string>& ids) {
    wire::value body = {{"cmd", "key_event"}, {"act", act_name}, {"ids", ids}};
    if (!o.rotate_aes_key) body["rotate"] = false;
    auto r = cli::master_request(*cfg, body, std::chrono::seconds(10));
    if (!r.body) return false;
    if (auto* err = wire::find(*r.body, "error")) {
      std::cerr << "The master refused the key event: " << wire::as_text(*err).value_or("?") << "\n";
      return false;
    }
    return true;
  };
  return cli::keys::run_salt_key(o, *cfg, io);
}
