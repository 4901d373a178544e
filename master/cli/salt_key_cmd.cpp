// salt-key: manage minion keys in the master's key directories (Salt 3008 flags and
// output), then tell the running master (ipc key_event) so it drops/rotates sessions.
// The main (salt_key.cpp) only calls salt_key_main.
#include <iostream>

#include "core/util/log.hpp"
#include "master/cli/common.hpp"
#include "master/cli/key_gen.hpp"
#include "master/cli/key_ops.hpp"
#include "master/ipc_protocol.hpp"

namespace sylvite::cli {

namespace ipc = master::ipc;

int salt_key_main(int argc, char** argv, cli_env& env) {
  const std::string usage = "salt-key [options]";
  CLI::App app{"salt-key is used to manage Salt authentication keys", "salt-key"};
  app.set_version_flag("--version", version_line("salt-key"));
  std::string config_dir = "/etc/salt";
  log_flags logf;
  add_config_dir_flag(app, config_dir);
  keys::key_options o;
  output_flags of;
  std::string user, saltfile, rotate = "True", preserve;
  bool quiet = false, hard_crash = false;
  app.add_option("--saltfile", saltfile, "Specify the path to a Saltfile (not supported).");
  app.add_option("-u,--user", user, "Specify user to run salt-key (not supported: refused unless it is the current user).");
  app.add_flag("--hard-crash", hard_crash, "Accepted for compatibility.");
  app.add_flag("-q,--quiet", quiet, "Suppress output (not supported: refused).");
  app.add_flag("-y,--yes", o.yes, "Answer \"Yes\" to all questions presented. Default: False.");
  app.add_option("--rotate-aes-key", rotate,
                 "Setting this to False prevents the master from refreshing the key session when keys are "
                 "deleted or rejected. Default: True.");
  app.add_option("--preserve-minions", preserve, "Keep the minion cache of deleted keys (not supported: True is refused).");
  add_output_flags(app, of, "salt-key");
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
  keys::gen_keys_options gk;
  keys::gen_signature_options gs;
  bool gen_signature = false;
  int keysize = 2048;
  auto* kg = app.add_option_group("Key Generation Options");
  kg->add_option("--gen-keys", gk.name, "Set a name to generate a keypair for use with salt.");
  kg->add_option("--gen-keys-dir", gk.dir,
                 "Set the directory to save the generated keypair, only works with \"--gen-keys\" option. "
                 "Default: '.'.");
  auto* ks = kg->add_option("--keysize", keysize,
                            "Set the keysize for the generated key, only works with the \"--gen-keys\" option, the "
                            "key size must be 2048 or higher, otherwise it will be rounded up to 2048. Default: 2048.");
  kg->add_flag("--gen-signature", gen_signature,
               "Create a signature file of the masters public-key named master_pubkey_signature. The signature can "
               "be send to a minion in the masters auth-reply and enables the minion to verify the masters "
               "public-key cryptographically. This requires a new signing-key-pair which can be auto-created with "
               "the --auto-create parameter.");
  kg->add_option("--priv", gs.priv, "The private-key file to create a signature with.");
  kg->add_option("--signature-path", gs.signature_path, "The path where the signature file should be written.");
  kg->add_option("--pub", gs.pub, "The public-key file to create a signature for.");
  kg->add_flag("--auto-create", gs.auto_create, "Auto-create a signing key-pair if it does not yet exist.");
  add_log_flags(app, logf, false);

  std::vector<std::string> stray;  // Salt ignores stray positional arguments (except with -D)
  app.add_option("args", stray)->group("");
  if (auto rc = parse_cli(app, argc, argv, usage, *env.out, *env.err)) return *rc;
  // Salt's CLI logging: the console (stderr) at -l (default warning), optionally a file.
  init_cli_logging("salt-key", logf);
  if (!saltfile.empty()) return usage_error("salt-key", usage, "--saltfile is not supported by sylvite", *env.err);
  // Accepted by Salt; refused here rather than accepted and ignored.
  if (!user.empty() && user != env.user())
    return usage_error("salt-key", usage,
                       "-u/--user is not supported by sylvite: run salt-key as the user '" + user + "' instead",
                       *env.err);
  if (quiet) return usage_error("salt-key", usage, "-q/--quiet is not supported by sylvite", *env.err);
  if (!preserve.empty() && !(preserve == "False" || preserve == "false" || preserve == "0" || preserve == "no"))
    return usage_error("salt-key", usage,
                       "--preserve-minions is not supported by sylvite: deleting a key also deletes its minion cache",
                       *env.err);
  if (o.list && !(o.list->rfind("acc", 0) == 0 || o.list->rfind("pre", 0) == 0 || o.list->rfind("un", 0) == 0 ||
                  o.list->rfind("rej", 0) == 0 || o.list->rfind("den", 0) == 0 || o.list->rfind("all", 0) == 0))
    return usage_error("salt-key", usage, "'" + *o.list + "' is not a valid argument to '--list'", *env.err);
  if (keysize < 2048) return usage_error("salt-key", usage, "The minimum value for keysize is 2048", *env.err);
  if (keysize > 32768) return usage_error("salt-key", usage, "The maximum value for keysize is 32768", *env.err);
  // Salt's order of commands (KeyCLI._update_opts): gen_keys, gen_signature, then the rest.
  auto show = [&](const wire::value& ret) {
    wire::value data = {{"return", ret}};
    emit(of, output::display(of.out.empty() || of.out == "key" ? "nested" : of.out, data, make_output_options(of)),
         *env.out);
  };
  if (!gk.name.empty()) {
    gk.keysize = keysize;
    show(keys::gen_keys(gk));
    return ex_ok;
  }
  if (o.delete_all && !stray.empty())
  {
    (*env.err) << "Error: Delete all takes no arguments. Use -d to delete specified keys\n";
    return ex_ok;  // Salt's salt_key() prints the SaltInvocationError and exits 0
  }
  {
    std::string r = rotate;
    for (auto& ch : r) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    o.rotate_aes_key = !(r == "false" || r == "0" || r == "no");
  }

  auto cfg = load_config(config_dir, *env.err);
  if (!cfg) return ex_client_error;
  if (gen_signature) {
    if (ks->count()) gs.keysize = keysize;
    show(keys::gen_signature(gs, *cfg, *env.err));
    return ex_ok;
  }
  o.out = of.out == "key" ? "" : of.out;
  o.oopt = make_output_options(of);

  keys::key_io io{(*env.in), (*env.out), (*env.err), {}};
  io.notify = [&](const std::string& act_name, const std::vector<std::string>& ids) {
    ipc::key_event ev{act_name, ids, std::nullopt};
    if (!o.rotate_aes_key) ev.rotate = false;
    auto r = env.request(*cfg, ipc::encode(ev), std::chrono::seconds(10));
    if (!r.body) return false;
    auto d = ipc::decode_key_event_reply(*r.body);
    if (d) {
      if (auto* e = std::get_if<ipc::error_reply>(&*d)) {
        (*env.err) << "The master refused the key event: " << e->error << "\n";
        return false;
      }
    }
    return true;
  };
  return keys::run_salt_key(o, *cfg, io);
}

}  // namespace sylvite::cli
