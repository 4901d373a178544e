# master core targets (sylvite_master library, salt-master executable) go here
