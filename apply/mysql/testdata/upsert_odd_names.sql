INSERT INTO `my ``db```.`tä ble` (`a``b`, `ü c`) VALUES
(1, 'x')
ON DUPLICATE KEY UPDATE `ü c` = VALUES(`ü c`)
